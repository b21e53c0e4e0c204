/**
 * Profile of one uncontended acquire + release (issue 14, item 2): what the database does for each statement the
 * library sends, and what the client spends per operation, next to the seed's raw SQL and the floor of the data model.
 *
 *   npm run bench:profile [-- --cycles=2000 --rounds=4 --cpu-profile]
 *
 * 1. Captures the statements the library really sends for one acquire + release of a fresh key and of a released
 *    key (the row is kept on release, so later acquisitions take the UPDATE path), and runs `EXPLAIN (ANALYZE,
 *    BUFFERS)` of each with the captured parameters inside a transaction that is rolled back.
 * 2. pg_stat_statements over `--cycles` cycles of each implementation: planning and execution time, buffers and
 *    WAL per call (the embedded server is started with `shared_preload_libraries = pg_stat_statements`; with
 *    DATABASE_URL this part needs the extension to be available there).
 * 3. Client CPU per cycle (user + system of this process), implementations interleaved over `--rounds`; with
 *    `--cpu-profile`, a V8 CPU profile of the library's loop, summarised by package, written to
 *    artifacts/profile/library.cpuprofile (open it in Chrome DevTools).
 *
 * Prints a Markdown report and writes it to bench/results/profile.md.
 *
 *   npm run bench:profile -- --http [--seconds=5] [--only=exclusive,plain]
 *
 * Instead: the HTTP scenario's server (bench/http-app.ts) under autocannon, one endpoint at a time, with a V8 CPU
 * profile of the server for each: its self time per request by package, and its top functions (the decorated
 * request's client CPU, next to the same handler undecorated). Written to artifacts/profile/http.md, each profile to
 * artifacts/profile/http-<endpoint>.cpuprofile.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdir, writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LeaseService } from 'nest-pg-lease';
import pg from 'pg';
import { DataSource } from 'typeorm';
import autocannon from 'autocannon';
import { startServer } from './scenarios/http.js';
import { seed } from './support/contenders.js';
import { BenchDatabase } from './support/db.js';
import { median } from './support/measure.js';

const LEASE_OPTIONS = { timing: { heartbeatIntervalMs: 10_000, leaseTimeoutMs: 60_000 } };

interface Captured {
  text: string;
  values: unknown[];
}

/** Records the statements `pg` clients send while `capturing` is on (text and parameters, as sent). */
let capturing: Captured[] | undefined;
function installCapture(): void {
  const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  proto.query = function (this: unknown, ...args: unknown[]) {
    if (capturing) {
      const [first, second] = args as [string | { text: string; values?: unknown[] }, unknown[] | undefined];
      if (typeof first === 'string') capturing.push({ text: first, values: Array.isArray(second) ? second : [] });
      else if (first && typeof first.text === 'string')
        capturing.push({ text: first.text, values: first.values ?? [] });
    }
    return original.apply(this, args);
  };
}

const squash = (text: string) => text.replace(/\s+/g, ' ').trim();
const short = (text: string, width = 90) => {
  const flat = squash(text);
  return flat.length > width ? `${flat.slice(0, width - 1)}…` : flat;
};

interface Cycle {
  name: string;
  setup(): Promise<void>;
  /** One acquire + release of a key never used before (`i` makes it unique within the phase). */
  cycle(i: number): Promise<void>;
  teardown(): Promise<void>;
}

function library(url: string, tag: string): Cycle {
  let dataSource: DataSource | undefined;
  let service: LeaseService | undefined;
  return {
    name: 'nest-pg-lease',
    setup: async () => {
      dataSource = new DataSource({ type: 'postgres', url, extra: { max: 1 } });
      await dataSource.initialize();
      service = new LeaseService(dataSource, LEASE_OPTIONS);
      await service.init();
    },
    cycle: async (i) => {
      const lease = await service!.tryAcquire(`${tag}:lib:${i}`);
      if (!lease) throw new Error('uncontended tryAcquire refused');
      await lease.release();
    },
    teardown: async () => {
      await service?.close();
      await dataSource?.destroy();
    },
  };
}

function seedSql(url: string, tag: string): Cycle {
  let pool: pg.Pool | undefined;
  return {
    name: 'seed upsert + delete (raw SQL)',
    setup: async () => {
      pool = new pg.Pool({ connectionString: url, max: 1 });
      await pool.query('SELECT 1');
    },
    cycle: async (i) => {
      const key = `${tag}:seed:${i}`;
      const token = randomUUID();
      if ((await seed.acquire(pool!, key, token)).rowCount !== 1) throw new Error('uncontended seed upsert refused');
      await seed.release(pool!, key, token);
    },
    teardown: async () => pool?.end(),
  };
}

/**
 * The floor of the library's data model: the same lease table, a fencing token drawn under the row lock, a soft
 * release — and nothing else (no waiter table, no hold, no takeover report). What the library's statements cost
 * above this is the price of waiting lines and reporting.
 */
function floorSql(url: string, tag: string): Cycle {
  let pool: pg.Pool | undefined;
  return {
    name: 'floor: bare upsert + soft release (same table)',
    setup: async () => {
      pool = new pg.Pool({ connectionString: url, max: 1 });
      await pool.query('SELECT 1');
    },
    cycle: async (i) => {
      const key = `${tag}:floor:${i}`;
      const token = randomUUID();
      const acquired = await pool!.query({
        name: 'floor_acquire',
        text: `INSERT INTO job_lease AS l (target_id, lease_token, fencing_token, owner, lease_timeout_ms, acquired_at, updated_at)
          VALUES ($1, $2, nextval('job_lease_fencing_seq'), 'floor', 60000, clock_timestamp(), clock_timestamp())
          ON CONFLICT (target_id, slot) DO UPDATE SET lease_token = EXCLUDED.lease_token,
            fencing_token = nextval('job_lease_fencing_seq'), acquired_at = EXCLUDED.acquired_at, updated_at = EXCLUDED.updated_at
          WHERE l.lease_token IS NULL OR l.updated_at + l.lease_timeout_ms * interval '1 millisecond' <= clock_timestamp()
          RETURNING fencing_token`,
        values: [key, token],
      });
      if (acquired.rowCount !== 1) throw new Error('uncontended floor upsert refused');
      await pool!.query({
        name: 'floor_release',
        text: 'UPDATE job_lease SET lease_token = NULL WHERE target_id = $1 AND lease_token = $2',
        values: [key, token],
      });
    },
    teardown: async () => pool?.end(),
  };
}

/** EXPLAIN (ANALYZE, BUFFERS) of one captured statement, in a transaction rolled back afterwards. */
async function explain(db: pg.Client, statement: Captured): Promise<string[]> {
  const { rows } = await db.query<{ 'QUERY PLAN': string }>(
    `EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF, SUMMARY ON) ${statement.text}`,
    statement.values,
  );
  return rows.map((row) => row['QUERY PLAN']);
}

/** Runs the library once on a fresh key and once on a released key, capturing and explaining every statement. */
async function explainLibrary(url: string, report: string[]): Promise<void> {
  const dataSource = new DataSource({ type: 'postgres', url, extra: { max: 1 } });
  await dataSource.initialize();
  const service = new LeaseService(dataSource, LEASE_OPTIONS);
  await service.init();
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  try {
    for (const [label, key] of [
      ['fresh key (first acquisition: INSERT path)', `explain:${randomUUID()}`],
      ['released key (row kept: UPDATE path)', 'explain:again'],
    ] as const) {
      if (label.startsWith('released')) await (await service.tryAcquire(key))!.release();
      capturing = [];
      const lease = await service.tryAcquire(key);
      if (!lease) throw new Error('uncontended tryAcquire refused');
      await lease.release();
      const captured = capturing;
      capturing = undefined;
      report.push(`### ${label}: ${captured.length} statements`, '');
      // Replay both in one transaction (the release needs the acquired row), then roll back; twice, and report the
      // second pass: the first one pays for this backend's cold caches (catalog, plan, sequence).
      for (const pass of [1, 2]) {
        await db.query('BEGIN');
        try {
          // The real run kept the row (soft release): for the first acquisition, replay on a key without one.
          if (label.startsWith('fresh')) await db.query('DELETE FROM job_lease WHERE target_id = $1', [key]);
          for (const [index, statement] of captured.entries()) {
            const lines = await explain(db, statement);
            if (pass === 2) report.push(`${index + 1}. \`${short(statement.text)}\``, '', '```', ...lines, '```', '');
          }
        } finally {
          await db.query('ROLLBACK');
        }
      }
    }
  } finally {
    await db.end();
    await service.close();
    await dataSource.destroy();
  }
}

interface StatementStats {
  query: string;
  calls: number;
  plans: number;
  planMs: number;
  execMs: number;
  hits: number;
  walBytes: number;
  rows: number;
}

async function statementStats(db: BenchDatabase, minCalls: number): Promise<StatementStats[]> {
  const { rows } = await db.query<{
    query: string;
    calls: string;
    plans: string;
    plan_ms: number;
    exec_ms: number;
    hits: number;
    wal: number;
    rows: number;
  }>(
    `SELECT query, calls::text, plans::text, total_plan_time / calls AS plan_ms, total_exec_time / calls AS exec_ms,
       shared_blks_hit::float8 / calls AS hits, wal_bytes::float8 / calls AS wal, rows::float8 / calls AS rows
     FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND calls >= $1 ORDER BY total_exec_time DESC`,
    [minCalls],
  );
  return rows.map((row) => ({
    query: row.query,
    calls: Number(row.calls),
    plans: Number(row.plans),
    planMs: row.plan_ms,
    execMs: row.exec_ms,
    hits: row.hits,
    walBytes: row.wal,
    rows: row.rows,
  }));
}

/** Self time of a V8 CPU profile, by where the code lives. */
function summariseProfile(profile: {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string; lineNumber: number } }>;
  samples?: number[];
  timeDeltas?: number[];
}): { byPackage: Array<[string, number]>; topFunctions: Array<[string, number]>; totalMs: number } {
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const self = new Map<number, number>();
  (profile.samples ?? []).forEach((id, index) =>
    self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas?.[index] ?? 0)),
  );
  const byPackage = new Map<string, number>();
  const byFunction = new Map<string, number>();
  let total = 0;
  for (const [id, us] of self) {
    const frame = nodes.get(id)!.callFrame;
    total += us;
    const url = frame.url;
    const pkg =
      frame.functionName === '(idle)' ||
      frame.functionName === '(program)' ||
      frame.functionName === '(garbage collector)'
        ? frame.functionName
        : (/node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1] ??
          (url.includes('/libs/lease/')
            ? 'nest-pg-lease'
            : url.includes('/bench/')
              ? 'bench'
              : url
                ? 'node:internal'
                : 'native'));
    byPackage.set(pkg, (byPackage.get(pkg) ?? 0) + us);
    const name = `${frame.functionName || '(anonymous)'} ${url.replace(/^.*node_modules\//, '').replace(/^.*\/libs\//, 'libs/')}:${frame.lineNumber + 1}`;
    byFunction.set(name, (byFunction.get(name) ?? 0) + us);
  }
  const sorted = (map: Map<string, number>) => [...map].sort((a, b) => b[1] - a[1]);
  return { byPackage: sorted(byPackage), topFunctions: sorted(byFunction).slice(0, 20), totalMs: total / 1000 };
}

type CpuProfile = Parameters<typeof summariseProfile>[0];

/** The HTTP server's CPU per request, endpoint by endpoint (see the module note). */
async function profileHttp(seconds: number, only?: string[]): Promise<void> {
  const paths = ['plain', 'exclusive', 'plain-write', 'exclusive-write', 'exclusive-save'].filter(
    (path) => !only || only.includes(path),
  );
  const out = join(dirname(dirname(fileURLToPath(import.meta.url))), 'artifacts/profile');
  await mkdir(out, { recursive: true });
  const db = await BenchDatabase.open();
  const report: string[] = [];
  const log = (line = '') => {
    console.log(line);
    report.push(line);
  };
  try {
    await db.createLeaseTables();
    await db.query('CREATE TABLE bench_counter (id int PRIMARY KEY, n bigint NOT NULL)');
    await db.query('INSERT INTO bench_counter SELECT g, 0 FROM generate_series(0, 63) g');
    const { base, child } = await startServer(db.url);
    let counter = 0;
    const load = (path: string, duration: number) =>
      autocannon({
        url: base,
        connections: 16,
        duration,
        requests: [{ method: 'GET', setupRequest: (request) => ({ ...request, path: `/${path}?k=${counter++}` }) }],
      });
    try {
      log(`# CPU profile of the HTTP scenario's server, per request`);
      log();
      log(`${new Date().toISOString()} — Node ${process.version}; ${seconds} s per endpoint, 16 connections.`);
      log();
      for (const path of paths) await load(path, 1);
      for (const path of paths) {
        await fetch(`${base}/profile/start`);
        const result = await load(path, seconds);
        const profile = (await (await fetch(`${base}/profile/stop`)).json()) as CpuProfile;
        await writeFile(join(out, `http-${path}.cpuprofile`), JSON.stringify(profile));
        const requests = result.requests.total;
        const summary = summariseProfile(profile);
        const busy = summary.byPackage.filter(([pkg]) => pkg !== '(idle)').reduce((sum, [, us]) => sum + us, 0);
        log(
          `## /${path}: ${Math.round(requests / result.duration)} req/s, ${(busy / requests).toFixed(0)} µs CPU/request`,
        );
        log();
        log('| where | µs/request | share |');
        log('|---|---:|---:|');
        for (const [pkg, us] of summary.byPackage.filter(([pkg]) => pkg !== '(idle)').slice(0, 12)) {
          log(`| ${pkg} | ${(us / requests).toFixed(1)} | ${((100 * us) / busy).toFixed(1)} % |`);
        }
        log();
        log('Top functions by self time:');
        log();
        for (const [name, us] of summary.topFunctions.filter(([name]) => !name.startsWith('(idle)'))) {
          log(`- ${(us / requests).toFixed(1)} µs/request — \`${name}\``);
        }
        log();
      }
    } finally {
      child.kill('SIGTERM');
      if (child.exitCode === null) await once(child, 'exit');
    }
  } finally {
    await db.close();
  }
  await writeFile(join(out, 'http.md'), `${report.join('\n')}\n`);
  console.log('Wrote artifacts/profile/http.md');
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const flag = (name: string, fallback: number) =>
    Number(args.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? fallback);
  if (args.includes('--http')) {
    const only = args.find((a) => a.startsWith('--only='))?.slice('--only='.length);
    return profileHttp(flag('seconds', 5), only?.split(','));
  }
  const cycles = flag('cycles', 2_000);
  const rounds = flag('rounds', 4);
  const cpuProfile = args.includes('--cpu-profile');
  installCapture();
  const db = await BenchDatabase.open({
    shared_preload_libraries: 'pg_stat_statements',
    'pg_stat_statements.track_planning': 'on',
  });
  const report: string[] = [];
  const log = (line = '') => {
    console.log(line);
    report.push(line);
  };
  try {
    await db.createLeaseTables();
    await db.query(seed.table);
    const stats = await db
      .query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements')
      .then(() => true)
      .catch((error: unknown) => {
        log(`(pg_stat_statements unavailable: ${String(error)}; part 2 skipped)`);
        return false;
      });
    const { rows: load } = await db.query<{ version: string }>('SELECT version()');
    log(`# Profile of one uncontended acquire + release`);
    log();
    log(
      `${new Date().toISOString()} — ${load[0].version.split(',')[0]}, Node ${process.version}; ${cycles} cycles × ${rounds} rounds per implementation.`,
    );
    log();

    log('## 1. The statements the library sends, explained');
    log();
    const explained: string[] = [];
    await explainLibrary(db.url, explained);
    for (const line of explained) log(line);

    const implementations = (tag: string) => [library(db.url, tag), seedSql(db.url, tag), floorSql(db.url, tag)];
    const cpu = new Map<string, number[]>();
    const latency = new Map<string, number[]>();
    if (stats) await db.query('SELECT pg_stat_statements_reset()');
    for (let round = 0; round < rounds; round++) {
      const list = implementations(`r${round}`);
      for (const impl of round % 2 === 0 ? list : list.reverse()) {
        await impl.setup();
        for (let i = 0; i < 20; i++) await impl.cycle(-1 - i);
        const cpu0 = process.cpuUsage();
        const t0 = performance.now();
        for (let i = 0; i < cycles; i++) await impl.cycle(i);
        const elapsed = performance.now() - t0;
        const used = process.cpuUsage(cpu0);
        await impl.teardown();
        (cpu.get(impl.name) ?? cpu.set(impl.name, []).get(impl.name)!).push((used.user + used.system) / cycles);
        (latency.get(impl.name) ?? latency.set(impl.name, []).get(impl.name)!).push(elapsed / cycles);
      }
    }

    if (stats) {
      log('## 2. pg_stat_statements over all rounds (per call)');
      log();
      log('| statement | calls | plans | plan ms | exec ms | buffers hit | WAL B | rows |');
      log('|---|---:|---:|---:|---:|---:|---:|---:|');
      for (const row of await statementStats(db, cycles)) {
        log(
          `| \`${short(row.query, 70).replace(/\|/g, '\\|')}\` | ${row.calls} | ${row.plans} | ${row.planMs.toFixed(3)} | ` +
            `${row.execMs.toFixed(3)} | ${row.hits.toFixed(1)} | ${row.walBytes.toFixed(0)} | ${row.rows.toFixed(2)} |`,
        );
      }
      log();
    }

    log('## 3. Client: CPU and wall time per acquire + release (one connection, median of rounds)');
    log();
    log('| implementation | CPU µs/cycle | vs raw SQL | wall ms/cycle |');
    log('|---|---:|---:|---:|');
    const raw = median(cpu.get('seed upsert + delete (raw SQL)')!);
    for (const [name, samples] of cpu) {
      log(
        `| ${name} | ${median(samples).toFixed(0)} | ${(median(samples) / raw).toFixed(2)}× | ${median(latency.get(name)!).toFixed(3)} |`,
      );
    }
    log();

    if (cpuProfile) {
      const session = new Session();
      session.connect();
      await session.post('Profiler.enable');
      await session.post('Profiler.setSamplingInterval', { interval: 100 });
      const impl = library(db.url, 'prof');
      await impl.setup();
      for (let i = 0; i < 20; i++) await impl.cycle(-1 - i);
      await session.post('Profiler.start');
      for (let i = 0; i < cycles; i++) await impl.cycle(i);
      const { profile } = await session.post('Profiler.stop');
      await impl.teardown();
      session.disconnect();
      const root = dirname(dirname(fileURLToPath(import.meta.url)));
      await mkdir(join(root, 'artifacts/profile'), { recursive: true });
      await writeFile(join(root, 'artifacts/profile/library.cpuprofile'), JSON.stringify(profile));
      const summary = summariseProfile(profile);
      const busy = summary.byPackage.filter(([pkg]) => pkg !== '(idle)').reduce((sum, [, us]) => sum + us, 0);
      log(`## 4. CPU profile of the library's loop (${cycles} cycles; self time, idle excluded; µs per cycle)`);
      log();
      log('| where | µs/cycle | share |');
      log('|---|---:|---:|');
      for (const [pkg, us] of summary.byPackage.filter(([pkg]) => pkg !== '(idle)')) {
        log(`| ${pkg} | ${(us / cycles).toFixed(1)} | ${((100 * us) / busy).toFixed(1)} % |`);
      }
      log();
      log('Top functions by self time:');
      log();
      for (const [name, us] of summary.topFunctions.filter(([name]) => !name.startsWith('(idle)'))) {
        log(`- ${(us / cycles).toFixed(1)} µs/cycle — \`${name}\``);
      }
      log();
    }
  } finally {
    await db.close();
  }
  const results = join(dirname(fileURLToPath(import.meta.url)), 'results');
  await writeFile(join(results, 'profile.md'), `${report.join('\n')}\n`);
  console.log('Wrote bench/results/profile.md');
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
