/**
 * `npx tsx bench/release-at-load.ts` — how long a release takes, as its caller waits for it (the client bound of a
 * release is what it must fit in: docs/bounds.md), on a quiet machine and beside CPU hogs (`node -e 'for(;;);'`,
 * started and ended here by their process ids). One PostgreSQL (DATABASE_URL, else an embedded one), one client
 * process. Each scenario: acquire a key, then time `lease.release()` (the group commit's turn, a pooled connection,
 * the statement, its commit), one at a time and 8 at once, on sessions of the library's own and framed as behind a
 * transaction pooler (`pooler: 'transaction'`: three round trips). The bounds are set far above what is measured, so
 * nothing is cut.
 *
 * Flags: --releases=n per scenario (default 400), --hogs=n (default 3; 0 measures the quiet machine only).
 */
import 'reflect-metadata';
import { spawn, type ChildProcess } from 'node:child_process';
import { loadavg } from 'node:os';
import { createDatabase, dropDatabase, startPostgres } from '@app/pg-harness';
import { Logger } from '@nestjs/common';
import type { LeaseModuleOptions } from 'nest-pg-lease';
import { openService } from '../test/support/lease-service.js';
import { mergeLeaseOptions } from '../libs/lease/src/internal.js';

const flag = (name: string, fallback: number) =>
  Number(process.argv.find((arg) => arg.startsWith(`--${name}=`))?.split('=')[1] ?? fallback);
const releases = flag('releases', 400);
const hogCount = flag('hogs', 3);

/** Roomy timings: a release is bounded by one interval (10 s here), far above what it takes. */
const ROOMY: LeaseModuleOptions = {
  tables: { createSchema: true },
  timing: { heartbeatIntervalMs: 10_000, leaseTimeoutMs: 40_000 },
};

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
const fmt = (ms: number) => `${ms.toFixed(1)}`;

function startHogs(n: number): ChildProcess[] {
  return Array.from({ length: n }, () => spawn(process.execPath, ['-e', 'for(;;);'], { stdio: 'ignore' }));
}

function stopHogs(hogs: ChildProcess[]): void {
  for (const hog of hogs) if (hog.pid !== undefined) process.kill(hog.pid, 'SIGKILL');
}

/** `releases` releases, `parallel` at a time, each timed from its call to its settling. */
async function measure(url: string, options: LeaseModuleOptions, parallel: number, tag: string): Promise<number[]> {
  const opened = await openService(url, mergeLeaseOptions(ROOMY, options), { poolSize: 10 });
  const { service } = opened;
  const samples: number[] = [];
  let next = 0;
  try {
    const worker = async (w: number) => {
      for (let i = next++; i < releases; i = next++) {
        const lease = (await service.tryAcquire(`release-at-load:${tag}:${w}:${i}`))!;
        const started = performance.now();
        await lease.release();
        samples.push(performance.now() - started);
      }
    };
    await Promise.all(Array.from({ length: parallel }, (_, w) => worker(w)));
  } finally {
    await opened.close();
  }
  return samples;
}

async function main(): Promise<void> {
  Logger.overrideLogger(['error']);
  const server = process.env.DATABASE_URL ? undefined : await startPostgres();
  const serverUrl = process.env.DATABASE_URL ?? server!.url;
  const url = await createDatabase(serverUrl, 'bench_release_load');
  const rows: string[] = [];
  try {
    for (const hogs of hogCount > 0 ? [0, hogCount] : [0]) {
      const running = startHogs(hogs);
      try {
        await new Promise((resolve) => setTimeout(resolve, hogs > 0 ? 15_000 : 0)); // the load average rises
        for (const [label, options, parallel] of [
          ['own sessions, one at a time', {}, 1],
          ['own sessions, 8 at once', {}, 8],
          ['framed (pooler), 8 at once', { connections: { pooler: 'transaction' as const } }, 8],
        ] as const) {
          const load = loadavg()[0].toFixed(1);
          const sorted = (await measure(url, options, parallel, `${hogs}-${parallel}-${label.length}`)).sort(
            (a, b) => a - b,
          );
          rows.push(
            `| ${hogs} | ${load} | ${label} | ${fmt(percentile(sorted, 0.5))} | ${fmt(percentile(sorted, 0.99))} | ` +
              `${fmt(percentile(sorted, 0.999))} | ${fmt(sorted[sorted.length - 1])} |`,
          );
          console.log(rows[rows.length - 1]);
        }
      } finally {
        stopHogs(running);
      }
    }
  } finally {
    await dropDatabase(serverUrl, url);
    await server?.stop();
  }
  console.log(`\n${releases} releases per row, ms; load: the 1-minute load average as the row began\n`);
  console.log('| hogs | load | releases | p50 | p99 | p99.9 | max |\n|---|---|---|---|---|---|---|');
  for (const row of rows) console.log(row);
}

await main();
