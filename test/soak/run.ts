/**
 * Soak: nothing leaks over time (`npm run test:soak`; 5 minutes by default, `--minutes N` or SOAK_MINUTES).
 *
 * 4 worker processes × 8 loops churn over 1,000 keys (half the picks on 20 hot keys): tryAcquire, waits that time
 * out, waits aborted at a random moment, stalled holders taken over, holdAtLeastMs, run(). Every minute (or every
 * `--sample-seconds N`) the runner prints each process's RSS, heap used (after a full GC), active handles and
 * PostgreSQL connections, and the lease and waiter rows held. At the end: the heap and handle slopes (per minute)
 * after the first (warm-up) minute; no lease held, no
 * waiter row, no backend left; fencing order checked from the database's own history (grants recorded by a trigger,
 * fenced writes with a commit sequence). Exits non-zero when a check fails. The table goes to artifacts/soak/.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createDatabase, dropDatabase, startPostgres } from '@app/pg-harness';
import pg from 'pg';
import { resolveLeaseOptions, schemaStatements } from '../../libs/lease/src/internal.js';
import type { SoakCounts, SoakParentMessage, SoakWorkerConfig, SoakWorkerMessage } from './worker.js';

const PROCESSES = 4;
const LOOPS = 8;
const KEYS = 1_000;
const HOT_KEYS = 20;
// No shutdown grace: the soak closes its workers mid-loop, as before the drain (test/lease/drain*.e2e-spec.ts).
const LEASE = {
  timing: {
    heartbeatIntervalMs: 200,
    leaseTimeoutMs: 2_000,
    waiterTimeoutMs: 1_500,
    waitPollIntervalMs: 500,
    shutdownGraceMs: 0,
  },
};
/**
 * Growth allowed after warm-up before the run counts as leaking. A leak of one handle or one small object per
 * operation would grow by thousands per minute (each process runs about 4,000 operations a minute); the bounds sit
 * above the noise of sampling a busy process (its sockets and timers in flight: ±5 handles between samples).
 */
const MAX_HEAP_SLOPE_MB_PER_MIN = 1;
const MAX_HANDLE_SLOPE_PER_MIN = 5;

function minutesFromArgs(): number {
  const flag = process.argv.indexOf('--minutes');
  const value = Number(flag >= 0 ? process.argv[flag + 1] : (process.env.SOAK_MINUTES ?? 5));
  if (!Number.isFinite(value) || value < 2) throw new Error('--minutes (or SOAK_MINUTES) must be a number ≥ 2');
  return value;
}

/**
 * Seconds between samples (60 by default). The slopes are fitted to the samples after the warm-up minute: at least
 * four of them (`--minutes 3 --sample-seconds 6` gives twenty, over two minutes: CI's shorter soak).
 */
function sampleSecondsFromArgs(minutes: number): number {
  const flag = process.argv.indexOf('--sample-seconds');
  const value = flag >= 0 ? Number(process.argv[flag + 1]) : 60;
  if (!Number.isInteger(value) || value < 5 || value > 60 || 60 % value !== 0) {
    throw new Error('--sample-seconds must be a whole divisor of 60, at least 5');
  }
  if (((minutes - 1) * 60) / value < 4) {
    throw new Error(`--minutes ${minutes} --sample-seconds ${value}: fewer than 4 samples after the warm-up minute`);
  }
  return value;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const mb = (bytes: number) => bytes / 1024 / 1024;

interface Sample {
  /** Minutes since the churn began (a fraction with `--sample-seconds` below 60). */
  minute: number;
  rss: number;
  heapUsed: number;
  handles: number;
  connections: number;
  counts: SoakCounts;
}

class SoakWorker {
  readonly samples: Sample[] = [];
  done?: SoakCounts;
  private readonly child: ChildProcess;
  private readonly listeners = new Set<(message: SoakWorkerMessage) => void>();
  readonly exited: Promise<number | null>;

  constructor(readonly config: SoakWorkerConfig) {
    this.child = fork(join(process.cwd(), 'test', 'soak', 'worker.ts'), [JSON.stringify(config)], {
      execArgv: ['--import', 'tsx', '--expose-gc'],
      cwd: process.cwd(),
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: { ...process.env, NODE_OPTIONS: '' },
    });
    this.child.on('message', (message: SoakWorkerMessage) => {
      if (message.t === 'done') this.done = message.counts;
      for (const listener of this.listeners) listener(message);
    });
    this.exited = new Promise((resolve) => this.child.once('exit', resolve));
  }

  next<T extends SoakWorkerMessage['t']>(type: T, timeoutMs = 30_000): Promise<Extract<SoakWorkerMessage, { t: T }>> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`${this.config.name}: no '${type}' within ${timeoutMs} ms`)),
        timeoutMs,
      );
      const listener = (message: SoakWorkerMessage) => {
        if (message.t !== type) return;
        clearTimeout(timer);
        this.listeners.delete(listener);
        resolve(message as Extract<SoakWorkerMessage, { t: T }>);
      };
      this.listeners.add(listener);
    });
  }

  send(message: SoakParentMessage): void {
    if (this.child.connected) this.child.send(message);
  }

  kill(): void {
    this.child.kill('SIGKILL');
  }
}

/** Least-squares slope of y over x. */
function slope(points: Array<[number, number]>): number {
  const n = points.length;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  const num = points.reduce((s, [x, y]) => s + (x - mx) * (y - my), 0);
  const den = points.reduce((s, [x]) => s + (x - mx) ** 2, 0);
  return den === 0 ? 0 : num / den;
}

async function prepare(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const statement of schemaStatements(resolveLeaseOptions({}))) await client.query(statement);
    await client.query(`
      CREATE SEQUENCE soak_commit_seq AS bigint;
      CREATE TABLE soak_history (target text NOT NULL, fencing_token bigint NOT NULL, worker text NOT NULL,
        commit_seq bigint NOT NULL);
      CREATE SEQUENCE soak_grant_seq AS bigint;
      CREATE TABLE soak_grants (seq bigint NOT NULL, target text NOT NULL, fencing_token bigint NOT NULL);
      -- Every grant (a new lease token on a row), numbered while it holds the row lock: per target, grant order.
      CREATE FUNCTION soak_record_grant() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.lease_token IS NOT NULL AND (TG_OP = 'INSERT' OR OLD.lease_token IS DISTINCT FROM NEW.lease_token) THEN
          INSERT INTO soak_grants VALUES (nextval('soak_grant_seq'), NEW.target_id, NEW.fencing_token);
        END IF;
        RETURN NULL;
      END $$;
      CREATE TRIGGER soak_record_grant AFTER INSERT OR UPDATE ON job_lease
        FOR EACH ROW EXECUTE FUNCTION soak_record_grant();`);
  } finally {
    await client.end();
  }
}

/** Per target: grants strictly increasing in grant order; fenced writes never older than a committed newer one. */
async function fencingViolations(admin: pg.Client): Promise<{ grants: number; writes: number; violations: string[] }> {
  const violations: string[] = [];
  const grants = await admin.query<{ target: string; fencing_token: string }>(
    'SELECT target, fencing_token::text FROM soak_grants ORDER BY seq',
  );
  const topGrant = new Map<string, bigint>();
  for (const row of grants.rows) {
    const token = BigInt(row.fencing_token);
    const top = topGrant.get(row.target) ?? -1n;
    if (token <= top) violations.push(`${row.target}: grant with token ${token} after token ${top}`);
    else topGrant.set(row.target, token);
  }
  const writes = await admin.query<{ target: string; fencing_token: string }>(
    'SELECT target, fencing_token::text FROM soak_history ORDER BY commit_seq',
  );
  const topWrite = new Map<string, bigint>();
  for (const row of writes.rows) {
    const token = BigInt(row.fencing_token);
    const top = topWrite.get(row.target) ?? -1n;
    if (token < top)
      violations.push(`${row.target}: fenced write of token ${token} committed after one of token ${top}`);
    else topWrite.set(row.target, token);
  }
  return { grants: grants.rowCount ?? 0, writes: writes.rowCount ?? 0, violations };
}

async function main(): Promise<void> {
  const minutes = minutesFromArgs();
  const sampleSeconds = sampleSecondsFromArgs(minutes);
  const server = await startPostgres();
  const url = await createDatabase(server.url, 'soak');
  const admin = new pg.Client({ connectionString: url, application_name: 'soak runner' });
  await admin.connect();
  const lines: string[] = [];
  const print = (line = '') => {
    console.log(line);
    lines.push(line);
  };
  const row = (cells: unknown[]) => print(`| ${cells.join(' | ')} |`);
  let failed = false;
  const workers: SoakWorker[] = [];
  try {
    await prepare(url);
    for (let i = 0; i < PROCESSES; i++) {
      workers.push(
        new SoakWorker({
          name: `soak-${i}`,
          url,
          loops: LOOPS,
          keys: KEYS,
          hotKeys: HOT_KEYS,
          lease: LEASE,
          maxLifetimeMs: (minutes + 5) * 60_000,
        }),
      );
    }
    await Promise.all(workers.map((worker) => worker.next('ready')));
    const server = url.replace(/\/\/[^@]*@/, '//');
    print(
      `soak: ${PROCESSES} processes × ${LOOPS} loops over ${KEYS} keys (${HOT_KEYS} hot), ${minutes} min, ` +
        `a sample every ${sampleSeconds} s, ${server}`,
    );
    print();
    const columns = ['min', 'process', 'RSS MB', 'heap MB', 'handles', 'connections', 'granted', 'busy', 'timeouts'];
    columns.push('aborted', 'takeovers', 'lost', 'fenced writes', 'refused', 'errors', 'leases held', 'waiter rows');
    row(columns);
    row(columns.map(() => '---'));
    const started = performance.now();
    for (let second = sampleSeconds; second <= minutes * 60; second += sampleSeconds) {
      const minute = second / 60;
      await sleep(Math.max(0, started + second * 1_000 - performance.now()));
      const samples = await Promise.all(
        workers.map(async (worker) => {
          const reply = worker.next('sample');
          worker.send({ t: 'sample' });
          return reply;
        }),
      );
      const connections = await admin.query<{ owner: string; n: number }>(
        `SELECT split_part(application_name, ':', 1) AS owner, count(*)::int AS n FROM pg_stat_activity
         WHERE application_name LIKE 'soak-%' GROUP BY 1`,
      );
      const rows = (
        await admin.query<{ held: number; waiters: number }>(
          `SELECT (SELECT count(*)::int FROM job_lease WHERE lease_token IS NOT NULL) AS held,
                  (SELECT count(*)::int FROM job_lease_waiter) AS waiters`,
        )
      ).rows[0];
      for (const [i, worker] of workers.entries()) {
        const s = samples[i];
        const sample: Sample = {
          minute,
          rss: s.rss,
          heapUsed: s.heapUsed,
          handles: s.handles,
          connections: connections.rows.find((row) => row.owner === worker.config.name)?.n ?? 0,
          counts: s.counts,
        };
        const previous = worker.samples.at(-1)?.counts;
        worker.samples.push(sample);
        const delta = (key: keyof SoakCounts) => s.counts[key] - (previous?.[key] ?? 0);
        const operations = [
          'granted',
          'busy',
          'timeouts',
          'aborted',
          'takeovers',
          'lost',
          'writes',
          'refused',
          'errors',
        ];
        row([
          Number(minute.toFixed(2)),
          worker.config.name,
          mb(s.rss).toFixed(1),
          mb(s.heapUsed).toFixed(1),
          s.handles,
          sample.connections,
          ...operations.map((key) => delta(key as keyof SoakCounts)),
          i === 0 ? rows.held : '',
          i === 0 ? rows.waiters : '',
        ]);
      }
    }

    // Stop: every worker finishes its calls, closes its LeaseService and destroys its pool.
    for (const worker of workers) worker.send({ t: 'stop' });
    await Promise.race([Promise.all(workers.map((worker) => worker.exited)), sleep(60_000)]);
    // A backend ends a moment after its client closes the socket: give them a few seconds, then report what is left.
    const leftBackends = async () =>
      (
        await admin.query<{ application_name: string; state: string; query: string }>(
          `SELECT application_name, state, left(query, 80) AS query FROM pg_stat_activity
           WHERE application_name LIKE 'soak-%'`,
        )
      ).rows;
    for (const until = performance.now() + 10_000; (await leftBackends()).length > 0 && performance.now() < until;)
      await sleep(200);
    for (const backend of await leftBackends())
      print(`  left: ${backend.application_name} ${backend.state}: ${backend.query}`);
    const after = (
      await admin.query<{ held: number; waiters: number; backends: number; released: number }>(
        `SELECT (SELECT count(*)::int FROM job_lease WHERE lease_token IS NOT NULL) AS held,
                (SELECT count(*)::int FROM job_lease WHERE lease_token IS NULL) AS released,
                (SELECT count(*)::int FROM job_lease_waiter) AS waiters,
                (SELECT count(*)::int FROM pg_stat_activity WHERE application_name LIKE 'soak-%') AS backends`,
      )
    ).rows[0];
    const fencing = await fencingViolations(admin);
    const totals = workers.reduce(
      (sum, worker) => {
        for (const [key, value] of Object.entries(worker.done ?? {})) sum[key] = (sum[key] ?? 0) + value;
        return sum;
      },
      {} as Record<string, number>,
    );

    print();
    print('After the warm-up minute, least-squares slope per process:');
    print();
    print('| process | heap MB/min | RSS MB/min | handles/min | connections (min…max) |');
    print('|---|---|---|---|---|');
    for (const worker of workers) {
      const steady = worker.samples.filter((sample) => sample.minute > 1);
      const heapSlope = slope(steady.map((s) => [s.minute, mb(s.heapUsed)]));
      const rssSlope = slope(steady.map((s) => [s.minute, mb(s.rss)]));
      const handleSlope = slope(steady.map((s) => [s.minute, s.handles]));
      const conns = worker.samples.map((s) => s.connections);
      const range = `${Math.min(...conns)}…${Math.max(...conns)}`;
      row([worker.config.name, heapSlope.toFixed(3), rssSlope.toFixed(3), handleSlope.toFixed(2), range]);
      if (steady.length >= 2 && (heapSlope > MAX_HEAP_SLOPE_MB_PER_MIN || handleSlope > MAX_HANDLE_SLOPE_PER_MIN)) {
        failed = true;
        print(
          `  ✗ ${worker.config.name} grows: heap ${heapSlope.toFixed(3)} MB/min, handles ${handleSlope.toFixed(2)}/min`,
        );
      }
    }
    print();
    print(
      `Totals: ${Object.entries(totals)
        .map(([key, value]) => `${key} ${value}`)
        .join(', ')}`,
    );
    print(
      `After the run: ${after.held} leases held, ${after.waiters} waiter rows, ${after.backends} backends of the ` +
        `workers; ${after.released} released rows kept (one per key ever acquired, by design)`,
    );
    const checked = `${fencing.grants} grants and ${fencing.writes} fenced writes checked`;
    print(`Fencing order: ${checked}, ${fencing.violations.length} violations`);
    for (const violation of fencing.violations.slice(0, 20)) print(`  ✗ ${violation}`);
    const exits = workers.map((worker) => (worker.done ? 'ok' : 'no report'));
    if (exits.some((exit) => exit !== 'ok')) print(`Workers: ${exits.join(', ')}`);
    if (
      after.held ||
      after.waiters ||
      after.backends ||
      fencing.violations.length ||
      exits.some((exit) => exit !== 'ok')
    )
      failed = true;
    if ((totals.errors ?? 0) > 0) print(`Note: ${totals.errors} unexpected errors (see the workers' output above)`);
  } finally {
    for (const worker of workers) worker.kill();
    await admin.end();
    await dropDatabase(server.url, url).catch(() => undefined);
    await server.destroy();
  }
  mkdirSync(join(process.cwd(), 'artifacts', 'soak'), { recursive: true });
  writeFileSync(join(process.cwd(), 'artifacts', 'soak', 'summary.md'), `${lines.join('\n')}\n`);
  print();
  print(failed ? 'SOAK FAILED' : 'soak passed: flat heap and handles, nothing left behind, fencing order kept');
  process.exitCode = failed ? 1 : 0;
}

main().catch((error: unknown) => {
  console.error('soak failed to run', error);
  process.exit(1);
});
