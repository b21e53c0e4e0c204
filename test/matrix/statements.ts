/**
 * Which SQL statements each end-to-end file sends, and whether the matrix's smoke subset sends them all:
 * `node --import tsx test/matrix/statements.ts [--major 18]`; `--report` only compares the smoke subset with the
 * statements of the last run (`artifacts/matrix/statements.json`), after a change of the subset.
 *
 * One server (the installed 18 unless `--major` names a cached one) with pg_stat_statements loaded; every file of
 * the four suites runs alone under Jest, and after each the statements recorded since the last reset are read
 * (normalised by pg_stat_statements: constants become $n; here also whitespace and the random suffixes of test
 * databases and roles). Writes `artifacts/matrix/statements.json` (per file: seconds, statements) and prints the
 * statements that touch the library's objects and that some file sends but none of the smoke subset does. Slow (a
 * Jest start per file): a tool for choosing the subset, not a CI step.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startPostgres } from '@app/pg-harness';
import pg from 'pg';
import { binariesOf } from './binaries.js';
import { FULL, SMOKE } from './suites.js';

const root = process.cwd();
const saved = join(root, 'artifacts', 'matrix', 'statements.json');

/**
 * Statements of the library's objects and calls, and transaction control (the test's own admin queries on the
 * library's tables are counted too: the list printed at the end is read by a person).
 */
const LIBRARY =
  /lease|waiter|pg_notify|LISTEN|pg_control_system|pg_walfile_name|_privilege\(|to_regclass|to_regnamespace|^(SET|BEGIN|COMMIT|ROLLBACK|START TRANSACTION|SAVEPOINT|RELEASE)\b/i;

type PerFile = Record<string, { seconds: number; status: number | null; statements: string[] }>;

function normalise(query: string): string {
  return query
    .replace(/\s+/g, ' ')
    .replace(/\b([a-z_]+?)_[0-9a-f]{8,}\b/g, '$1_*')
    .trim();
}

/** Runs every file of the four suites alone on one server with pg_stat_statements; their statements by file. */
async function record(): Promise<PerFile> {
  const at = process.argv.indexOf('--major');
  const major = at >= 0 ? Number(process.argv[at + 1]) : 18;
  if (major !== 18) process.env.LEASE_PG_BINARIES = binariesOf(root, major, console.log);
  delete process.env.DATABASE_URL;
  const files = FULL.flatMap((folder) =>
    readdirSync(join(root, folder))
      .filter((name) => name.endsWith('.e2e-spec.ts'))
      .map((name) => `${folder}/${name}`),
  ).sort();

  const server = await startPostgres({
    settings: { shared_preload_libraries: 'pg_stat_statements', 'pg_stat_statements.max': 20_000 },
  });
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  const perFile: PerFile = {};
  try {
    await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    for (const file of files) {
      await admin.query('SELECT pg_stat_statements_reset()');
      const started = performance.now();
      const jest = spawnSync(
        process.execPath,
        ['--experimental-vm-modules', 'node_modules/jest/bin/jest.js', '--silent', file],
        { cwd: root, env: { ...process.env, DATABASE_URL: server.url }, encoding: 'utf8', maxBuffer: 256 << 20 },
      );
      const seconds = (performance.now() - started) / 1000;
      const { rows } = await admin.query<{ query: string }>('SELECT query FROM pg_stat_statements');
      const statements = [...new Set(rows.map((row) => normalise(row.query)))].sort();
      perFile[file] = { seconds, status: jest.status, statements };
      console.log(`${file}: ${seconds.toFixed(1)} s, exit ${jest.status}, ${statements.length} statements`);
    }
  } finally {
    await admin.end();
    await server.destroy();
  }
  mkdirSync(join(root, 'artifacts', 'matrix'), { recursive: true });
  writeFileSync(saved, `${JSON.stringify(perFile, null, 2)}\n`);
  return perFile;
}

const perFile = process.argv.includes('--report')
  ? (JSON.parse(readFileSync(saved, 'utf8')) as PerFile)
  : await record();
const inSmoke = new Set(SMOKE.flatMap((file) => perFile[file]?.statements ?? []));
const missed = new Map<string, string[]>();
for (const [file, { statements }] of Object.entries(perFile)) {
  for (const statement of statements) {
    if (!LIBRARY.test(statement) || inSmoke.has(statement)) continue;
    missed.set(statement, [...(missed.get(statement) ?? []), file]);
  }
}
const smokeSeconds = SMOKE.reduce((sum, file) => sum + (perFile[file]?.seconds ?? 0), 0);
console.log(`\nsmoke subset: ${SMOKE.length} files, ${smokeSeconds.toFixed(0)} s when recorded (one by one)`);
console.log(`library statements some file sends and the smoke subset does not: ${missed.size}`);
for (const [statement, senders] of missed)
  console.log(`\n- ${statement.slice(0, 400)}\n  sent by ${senders.join(', ')}`);
