/**
 * Handoff latency of the priority line: how long after a holder calls release() the waiter in line holds the lease.
 * Two "processes" (LeaseServices on DataSources of their own) pass one key back and forth; before each release the
 * waiter has queued and gone to sleep, so the grant can only come from a wake-up: LISTEN/NOTIFY, or, with
 * `notify: false`, the jittered poll.
 *
 *   npx tsx bench/priority-handoff.ts [--handoffs=200] [--poll-ms=100] [--json]
 *
 * Uses DATABASE_URL when set, else a throwaway embedded PostgreSQL. `priorityHandoff()` is exported for bench/run.ts.
 */
import { pathToFileURL } from 'node:url';
import { LeaseService, type Lease, type LeaseModuleOptions } from 'nest-pg-lease';
import { createDatabase, dropDatabase, startPostgres } from '@app/pg-harness';
import { Logger } from '@nestjs/common';
import pg from 'pg';
import { DataSource } from 'typeorm';
import { mergeLeaseOptions } from '../libs/lease/src/internal.js';

export interface HandoffResult {
  mode: string;
  pollIntervalMs: number;
  handoffs: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

interface Side {
  name: string;
  service: LeaseService;
  dataSource: DataSource;
}

const KEY = 'bench:priority-handoff';

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

async function side(url: string, name: string, options: LeaseModuleOptions): Promise<Side> {
  // One pooled connection: its last statement in pg_stat_activity tells when the waiter has gone to sleep.
  const dataSource = new DataSource({ type: 'postgres', url, applicationName: name, extra: { max: 1 } });
  await dataSource.initialize();
  // The library's own statement pool (`<name>:statements`) with one connection too, for the same reason.
  const service = new LeaseService(
    dataSource,
    mergeLeaseOptions({ tables: { createSchema: true }, owner: name, connections: { poolSize: 1 } }, options),
  );
  await service.init();
  return { name, service, dataSource };
}

/**
 * Resolves once `waiter` has queued and made its first attempt as a queued waiter: its row exists and the backend of
 * its statement pool is idle after the acquire statement (a wait runs attempt, enqueue, attempt on that one backend)
 * — or after its own release, which queued it again (the parked place, docs/group-commit.md: its call sends nothing).
 */
async function untilAsleep(probe: pg.Client, waiter: Side): Promise<void> {
  for (;;) {
    const { rows } = await probe.query<{ queued: boolean; asleep: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM job_lease_waiter WHERE target_id = $1 AND owner = $2) AS queued,
         coalesce(bool_and(state = 'idle' AND (ltrim(query) LIKE 'WITH held AS%' OR ltrim(query) LIKE 'WITH bound AS%')),
           false) AS asleep
       FROM pg_stat_activity WHERE application_name = $2 || ':statements'`,
      [KEY, waiter.name],
    );
    if (rows[0].queued && rows[0].asleep) return;
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}

async function measure(
  url: string,
  probe: pg.Client,
  mode: string,
  handoffs: number,
  options: LeaseModuleOptions,
): Promise<HandoffResult> {
  const settings = mergeLeaseOptions(
    { timing: { heartbeatIntervalMs: 1_000, leaseTimeoutMs: 10_000, waiterTimeoutMs: 30_000, shutdownGraceMs: 0 } },
    options,
  );
  const sides = [await side(url, `${mode}-a`, settings), await side(url, `${mode}-b`, settings)];
  const samples: number[] = [];
  try {
    let held: Lease = (await sides[0].service.tryAcquire(KEY))!;
    for (let i = 0; i < handoffs + 5; i++) {
      const waiter = sides[(i + 1) % 2];
      const granted = waiter.service.acquire(KEY, { onBusy: { wait: { timeoutMs: 60_000 } } });
      await untilAsleep(probe, waiter);
      const released = performance.now();
      await held.release();
      held = await granted;
      // The first few warm up the prepared statements and the LISTEN connections.
      if (i >= 5) samples.push(performance.now() - released);
    }
    await held.release();
  } finally {
    for (const s of sides) {
      await s.service.close();
      await s.dataSource.destroy();
    }
  }
  samples.sort((a, b) => a - b);
  return {
    mode,
    pollIntervalMs: settings.timing!.waitPollIntervalMs!,
    handoffs: samples.length,
    p50Ms: percentile(samples, 50),
    p99Ms: percentile(samples, 99),
    maxMs: samples[samples.length - 1],
  };
}

/**
 * p50 of one durable single-row INSERT (a commit with its WAL flush). A handoff is at least two of them (the release,
 * then the grant), so this is the yardstick for the NOTIFY figures on the machine at hand.
 */
async function commitP50(probe: pg.Client): Promise<number> {
  await probe.query('CREATE TABLE bench_commit_probe (id int PRIMARY KEY)');
  const samples: number[] = [];
  for (let i = 0; i < 200; i++) {
    const started = performance.now();
    await probe.query('INSERT INTO bench_commit_probe VALUES ($1)', [i]);
    samples.push(performance.now() - started);
  }
  await probe.query('DROP TABLE bench_commit_probe');
  return percentile(
    samples.sort((a, b) => a - b),
    50,
  );
}

/** Runs both modes on `serverUrl` (a database of its own, dropped afterwards). */
export async function priorityHandoff(
  serverUrl: string,
  handoffs = 200,
  pollMs = 100,
): Promise<{ results: HandoffResult[]; commitP50Ms: number }> {
  const url = await createDatabase(serverUrl, 'bench_prio');
  const probe = new pg.Client({ connectionString: url });
  await probe.connect();
  try {
    const results = [
      // A 10 s poll cannot be what wakes the waiter: every grant here is a NOTIFY.
      await measure(url, probe, 'notify', handoffs, {
        connections: { notify: true },
        timing: { waitPollIntervalMs: 10_000 },
      }),
      await measure(url, probe, 'poll', handoffs, {
        connections: { notify: false },
        timing: { waitPollIntervalMs: pollMs },
      }),
    ];
    return { results, commitP50Ms: await commitP50(probe) };
  } finally {
    await probe.end();
    await dropDatabase(serverUrl, url);
  }
}

export function formatHandoffTable(results: HandoffResult[]): string {
  const header = ['wake-up', 'waitPollIntervalMs', 'handoffs', 'p50 ms', 'p99 ms', 'max ms'];
  const rows = results.map((r) => [
    r.mode === 'notify' ? 'LISTEN/NOTIFY' : 'poll only (notify: false)',
    String(r.pollIntervalMs),
    String(r.handoffs),
    r.p50Ms.toFixed(2),
    r.p99Ms.toFixed(2),
    r.maxMs.toFixed(2),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i].length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

async function main(): Promise<void> {
  const flag = (name: string) => process.argv.find((arg) => arg.startsWith(`--${name}=`))?.split('=')[1];
  const handoffs = Number(flag('handoffs') ?? 200);
  const pollMs = Number(flag('poll-ms') ?? 100);
  Logger.overrideLogger(['error']);
  const server = await startPostgres();
  try {
    const probe = new pg.Client({ connectionString: server.url });
    await probe.connect();
    const version = (await probe.query<{ server_version: string }>('SHOW server_version')).rows[0].server_version;
    await probe.end();
    const { results, commitP50Ms } = await priorityHandoff(server.url, handoffs, pollMs);
    if (process.argv.includes('--json')) {
      console.log(JSON.stringify({ results, commitP50Ms }));
    } else {
      console.log(`priority handoff: release() → waiter holds the lease, ${handoffs} handoffs between two processes`);
      console.log(
        `PostgreSQL ${version} (${server.embedded ? 'embedded' : 'DATABASE_URL'}), Node ${process.version}\n`,
      );
      console.log(formatHandoffTable(results));
      console.log(
        `\none durable commit (single-row INSERT) p50: ${commitP50Ms.toFixed(2)} ms — a handoff is two commits`,
      );
    }
  } finally {
    await server.destroy();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
