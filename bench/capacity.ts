/**
 * One measured point of the capacity section (issue 14): N processes, each holding M leases through the library
 * (LeaseService on main, its own DataSource), all on one PostgreSQL, for a while. Reports the heartbeat tick
 * latency (p50, p99, max over every tick of every process), renewals lost, failed ticks, and what the server paid:
 * WAL bytes, commits and statements per second, backends.
 *
 *   npm run bench:capacity -- [--processes=16] [--leases=1000] [--interval=5000] [--seconds=120]
 *
 * `--interval` is heartbeatIntervalMs (the library's default is 30 s; a shorter one is a harder point: the rate of
 * renewals scales with leases ÷ interval). The lease timeout is 4 × the interval. Prints a Markdown summary and writes
 * it to bench/results/capacity-<processes>x<leases>-<interval>ms.md.
 */
import 'reflect-metadata';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { writeFile } from 'node:fs/promises';
import { cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { LeaseService } from 'nest-pg-lease';
import { DataSource } from 'typeorm';
import { BenchDatabase, countStatements, statementsSoFar } from './support/db.js';
import { forEachConcurrently } from './support/contenders.js';
import { percentile } from './support/measure.js';

interface WorkerReport {
  name: string;
  leases: number;
  tickLatenciesMs: number[];
  ticks: number;
  renewed: number;
  lost: number;
  failedTicks: number;
  /** Why leases were lost, and what failed ticks said (count by text). */
  lossReasons: Record<string, number>;
  tickErrors: Record<string, number>;
  statements: number;
  cpuMs: number;
  rssMb: number;
}

const flag = (name: string, fallback: number) =>
  Number(process.argv.find((arg) => arg.startsWith(`--${name}=`))?.split('=')[1] ?? fallback);

/** A worker process: acquires its leases, reports every tick, and after `seconds` prints its report. */
async function worker(url: string, name: string, leases: number, intervalMs: number, seconds: number): Promise<void> {
  countStatements();
  const dataSource = new DataSource({ type: 'postgres', url, applicationName: name, extra: { max: 4 } });
  await dataSource.initialize();
  const service = new LeaseService(dataSource, {
    timing: { heartbeatIntervalMs: intervalMs, leaseTimeoutMs: intervalMs * 4 },
    owner: name,
  });
  await service.init();
  const report: WorkerReport = {
    name,
    leases,
    tickLatenciesMs: [],
    ticks: 0,
    renewed: 0,
    lost: 0,
    failedTicks: 0,
    lossReasons: {},
    tickErrors: {},
    statements: 0,
    cpuMs: 0,
    rssMb: 0,
  };
  let measuring = false;
  let lastTick: Date | undefined;
  service.events$.subscribe((event) => {
    if (!measuring) return;
    if (event.type === 'renewed') {
      report.renewed++;
      // One tick's events share one `at`.
      if (event.at !== lastTick) {
        lastTick = event.at;
        report.ticks++;
        report.tickLatenciesMs.push(event.latencyMs);
      }
    } else if (event.type === 'lost') {
      report.lost++;
      report.lossReasons[event.reason] = (report.lossReasons[event.reason] ?? 0) + 1;
    } else if (event.type === 'renew-failed') {
      report.failedTicks++;
      const error = `${event.error.slice(0, 80)} (after ${Math.round(event.latencyMs)} ms)`;
      report.tickErrors[error] = (report.tickErrors[error] ?? 0) + 1;
    }
  });
  await forEachConcurrently(leases, 4, async (i) => {
    if (!(await service.tryAcquire(`cap:${name}:${i}`))) throw new Error(`${name}: uncontended acquire refused`);
  });
  console.log('ready');
  // The parent says when every process holds its leases: from then on, count.
  await new Promise<void>((resolve) => process.stdin.once('data', () => resolve()));
  measuring = true;
  const statements0 = statementsSoFar();
  const cpu0 = process.cpuUsage();
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  measuring = false;
  const cpu = process.cpuUsage(cpu0);
  report.cpuMs = (cpu.user + cpu.system) / 1000;
  report.statements = statementsSoFar() - statements0;
  report.rssMb = process.memoryUsage().rss / 1e6;
  console.log(JSON.stringify(report));
  // Releasing at close writes too: the parent reads the server's counters first, then lets us go.
  await new Promise<void>((resolve) => process.stdin.once('data', () => resolve()));
  await service.close();
  await dataSource.destroy();
}

async function main(): Promise<void> {
  const processes = flag('processes', 16);
  const leases = flag('leases', 1_000);
  const intervalMs = flag('interval', 5_000);
  const seconds = flag('seconds', 120);
  const db = await BenchDatabase.open();
  const lines: string[] = [];
  const log = (line = '') => {
    console.log(line);
    lines.push(line);
  };
  try {
    await db.createLeaseTables();

    const here = fileURLToPath(import.meta.url);
    const children = Array.from({ length: processes }, (_, index) =>
      spawn(
        process.execPath,
        [
          '--import',
          import.meta.resolve('tsx'),
          here,
          '--worker',
          db.url,
          `cap${index + 1}`,
          String(leases),
          String(intervalMs),
          String(seconds),
        ],
        { stdio: ['pipe', 'pipe', 'inherit'] },
      ),
    );
    const reports: WorkerReport[] = [];
    const ready = children.map(
      (child) =>
        new Promise<void>((resolve, reject) => {
          const lines = createInterface({ input: child.stdout });
          lines.on('line', (line) => {
            if (line === 'ready') resolve();
            else if (line.startsWith('{')) reports.push(JSON.parse(line) as WorkerReport);
          });
          child.once('exit', (code) =>
            code === 0 ? resolve() : reject(new Error(`worker exited with ${String(code)}`)),
          );
        }),
    );
    const t0 = performance.now();
    await Promise.all(ready);
    const setupSeconds = (performance.now() - t0) / 1000;
    // Full-page images: the first change of a page after a checkpoint logs the whole page (8 kB).
    const walStats = async () =>
      (await db.query<{ fpi: number }>('SELECT wal_fpi::float8 AS fpi FROM pg_stat_wal')).rows[0];
    const fpi0 = (await walStats()).fpi;
    const wal0 = await db.walPosition();
    const xid0 = await db.nextTransactionId();
    for (const child of children) child.stdin.write('go\n');
    const reported = performance.now() + seconds * 1000 + 60_000;
    while (reports.length < processes && performance.now() < reported) await new Promise((r) => setTimeout(r, 100));
    const wal = Number((await db.walPosition()) - wal0);
    const fpi = (await walStats()).fpi - fpi0;
    const backends = await db.query<{ app: string; n: number }>(
      `SELECT regexp_replace(application_name, '^cap[0-9]+', 'capN') AS app, count(*)::int AS n FROM pg_stat_activity
       WHERE datname = current_database() AND application_name LIKE 'cap%' GROUP BY 1 ORDER BY 1`,
    );
    const writeXacts = Number((await db.nextTransactionId()) - xid0);
    for (const child of children) child.stdin.write('stop\n');
    await Promise.all(children.map((child) => (child.exitCode === null ? once(child, 'exit') : Promise.resolve())));
    if (reports.length !== processes) throw new Error(`${reports.length} of ${processes} workers reported`);

    const ticks = reports.flatMap((report) => report.tickLatenciesMs);
    const totalLeases = processes * leases;
    const statements = reports.reduce((sum, report) => sum + report.statements, 0);
    const renewals = reports.reduce((sum, report) => sum + report.renewed, 0);
    const lost = reports.reduce((sum, report) => sum + report.lost, 0);
    const failed = reports.reduce((sum, report) => sum + report.failedTicks, 0);
    const cpuMs = reports.reduce((sum, report) => sum + report.cpuMs, 0);
    log(
      `# Capacity point: ${processes} processes × ${leases.toLocaleString('en-US')} leases, heartbeat every ${intervalMs} ms`,
    );
    log();
    log(
      `${new Date().toISOString()} — ${db.serverVersion.split(',')[0]}, Node ${process.version}, ${cpus().length} CPUs; ` +
        `${seconds} s measured after ${setupSeconds.toFixed(0)} s of setup (acquiring ${totalLeases.toLocaleString('en-US')} leases).`,
    );
    log();
    log('| figure | value |');
    log('|---|---:|');
    log(`| leases held | ${totalLeases.toLocaleString('en-US')} |`);
    log(`| heartbeat ticks measured (all processes) | ${ticks.length} |`);
    log(
      `| tick latency p50 / p99 / max | ${percentile(ticks, 50).toFixed(1)} / ${percentile(ticks, 99).toFixed(1)} / ${Math.max(...ticks).toFixed(1)} ms |`,
    );
    log(`| renewals confirmed | ${renewals.toLocaleString('en-US')} |`);
    log(`| renewals lost (\`lost\` events) | ${lost} |`);
    log(`| failed ticks (\`renew-failed\`) | ${failed} |`);
    log(`| renewals per second | ${(renewals / seconds).toFixed(0)} |`);
    log(`| statements per second (client round trips, all processes) | ${(statements / seconds).toFixed(1)} |`);
    log(`| write transactions per second | ${(writeXacts / seconds).toFixed(1)} |`);
    log(`| WAL per second | ${(wal / seconds / 1024).toFixed(1)} kB/s |`);
    log(
      `| full-page images in the WAL (after checkpoints) | ${fpi} (${((fpi * 8192 * 100) / Math.max(1, wal)).toFixed(0)} % of the bytes at most) |`,
    );
    log(`| WAL per 1,000 leases per tick | ${(wal / (renewals / 1000) / 1024).toFixed(1)} kB |`);
    log(
      `| WAL per 1,000 leases per second at this interval | ${(wal / seconds / (totalLeases / 1000) / 1024).toFixed(2)} kB/s |`,
    );
    log(`| client CPU per tick per 1,000 leases | ${(cpuMs / ticks.length / (leases / 1000)).toFixed(1)} ms |`);
    const merge = (pick: (report: WorkerReport) => Record<string, number>) => {
      const all: Record<string, number> = {};
      for (const report of reports) for (const [key, n] of Object.entries(pick(report))) all[key] = (all[key] ?? 0) + n;
      return (
        Object.entries(all)
          .map(([key, n]) => `${n} × ${key}`)
          .join('; ') || 'none'
      );
    };
    log(`| loss reasons | ${merge((report) => report.lossReasons)} |`);
    log(`| failed ticks said | ${merge((report) => report.tickErrors).replace(/\|/g, '\\|')} |`);
    log(`| worker RSS (mean) | ${(reports.reduce((s, r) => s + r.rssMb, 0) / processes).toFixed(0)} MB |`);
    log(
      `| backends per process at the end of the window (${backends.rows.map((row) => `${row.app}: ${row.n}`).join(', ')}) | ${(backends.rows.reduce((s, r) => s + r.n, 0) / processes).toFixed(1)} |`,
    );
    log();
  } finally {
    await db.close();
  }
  const file = `capacity-${processes}x${leases}-${intervalMs}ms.md`;
  await writeFile(join(dirname(fileURLToPath(import.meta.url)), 'results', file), `${lines.join('\n')}\n`);
  console.log(`Wrote bench/results/${file}`);
}

if (process.argv[2] === '--worker') {
  const [url, name, leases, intervalMs, seconds] = process.argv.slice(3);
  worker(url, name, Number(leases), Number(intervalMs), Number(seconds)).then(
    () => process.exit(0),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
} else {
  main().then(
    () => process.exit(0),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
