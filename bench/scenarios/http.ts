/**
 * The same handler undecorated and under `@Exclusive('bench:{k}')`, each request with a fresh key so the lease is
 * never busy: the cost of acquire + release on an HTTP request, for a handler that returns at once (the goal) and for
 * one that writes a row. The server is a child process (bench/http-app.ts); autocannon drives it from here, 16
 * connections, the endpoints alternating round by round (order flipped every round). The server's CPU time per
 * request (user + system, read before and after each round) is the row's client CPU.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { summarize, type BenchContext, type Measurement, type Row } from '../support/measure.js';

export const HTTP_SCENARIO = '@Exclusive HTTP endpoint';
const CONNECTIONS = 16;
export const HTTP_WRITE_SCENARIO = '@Exclusive HTTP endpoint that writes a row';
/** The write done as the lease's fenced save, the release riding on its commit (`fenced(work, { release: true })`). */
export const EXCLUSIVE_SAVE = '@Exclusive, save + release in one commit';
/** The goal's pair (a handler that does nothing), and a pair whose handler does one UPDATE, like a real endpoint. */
const VARIANTS = [
  { scenario: HTTP_SCENARIO, name: 'undecorated', path: 'plain' },
  { scenario: HTTP_SCENARIO, name: '@Exclusive', path: 'exclusive' },
  { scenario: HTTP_WRITE_SCENARIO, name: 'undecorated', path: 'plain-write' },
  { scenario: HTTP_WRITE_SCENARIO, name: '@Exclusive', path: 'exclusive-write' },
  { scenario: HTTP_WRITE_SCENARIO, name: EXCLUSIVE_SAVE, path: 'exclusive-save' },
] as const;

const benchDir = dirname(dirname(fileURLToPath(import.meta.url)));

export async function startServer(databaseUrl: string): Promise<{ base: string; child: ChildProcess }> {
  const child = spawn(process.execPath, ['--import', import.meta.resolve('tsx'), join(benchDir, 'http-app.ts')], {
    cwd: dirname(benchDir),
    env: { ...process.env, BENCH_DATABASE_URL: databaseUrl },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout });
  const exited = once(child, 'exit').then(([code]) => {
    throw new Error(`bench/http-app.ts exited with code ${String(code)} before listening`);
  });
  const listening = (async () => {
    for await (const line of lines) {
      const match = /^listening (\d+)$/.exec(line);
      if (match) return `http://127.0.0.1:${match[1]}`;
    }
    throw new Error('bench/http-app.ts closed its output before listening');
  })();
  return { base: await Promise.race([listening, exited]), child };
}

/** The server's CPU time so far (user + system, µs). */
async function cpuOf(base: string): Promise<number> {
  const response = await fetch(`${base}/cpu`);
  return ((await response.json()) as { us: number }).us;
}

async function statementsOf(base: string): Promise<number> {
  const response = await fetch(`${base}/statements`);
  return ((await response.json()) as { statements: number }).statements;
}

export async function httpEndpoint(ctx: BenchContext): Promise<Row[]> {
  const seconds = ctx.quick ? 2 : 4;
  const rounds = ctx.quick ? 2 : 3;
  ctx.log(`  ${HTTP_SCENARIO}s: ${rounds} rounds × ${seconds} s per endpoint, ${CONNECTIONS} connections`);
  const { base, child } = await startServer(ctx.db.url);
  let counter = 0;
  const load = (path: string, duration: number) =>
    autocannon({
      url: base,
      connections: CONNECTIONS,
      duration,
      requests: [{ method: 'GET', setupRequest: (request) => ({ ...request, path: `/${path}?k=${counter++}` }) }],
    });
  const results = new Map<string, Measurement[]>(VARIANTS.map((variant) => [variant.path, []]));
  try {
    for (const variant of VARIANTS) await load(variant.path, 1);
    for (let round = 0; round < rounds; round++) {
      for (const variant of round % 2 === 0 ? VARIANTS : [...VARIANTS].reverse()) {
        const statements0 = await statementsOf(base);
        const cpu0 = await cpuOf(base);
        const wal0 = await ctx.db.walPosition();
        const xid0 = await ctx.db.nextTransactionId();
        const result = await load(variant.path, seconds);
        const cpuUs = (await cpuOf(base)) - cpu0;
        const walBytes = Number((await ctx.db.walPosition()) - wal0);
        const writeTransactions = Number((await ctx.db.nextTransactionId()) - xid0);
        const statements = (await statementsOf(base)) - statements0;
        if (result.errors > 0 || result.non2xx > 0) {
          throw new Error(`${variant.name}: ${result.errors} errors and ${result.non2xx} non-2xx answers`);
        }
        const ops = result.requests.total;
        results.get(variant.path)!.push({
          ops,
          elapsedMs: result.duration * 1000,
          latenciesMs: [],
          percentilesMs: { p50: result.latency.p50, p99: result.latency.p99 },
          statements,
          writeTransactions,
          clientCpuUs: cpuUs,
          walBytes,
          deadTuples: 0,
          updates: 0,
          hotUpdates: 0,
          tableOps: ops,
        });
        ctx.log(
          `    round ${round + 1}/${rounds} /${variant.path}: ${Math.round(ops / result.duration)} req/s, p50 ${result.latency.p50} ms, server CPU ${Math.round(cpuUs / ops)} µs/req`,
        );
      }
    }
  } finally {
    child.kill('SIGTERM');
    if (child.exitCode === null) await once(child, 'exit');
  }
  return VARIANTS.map((variant) =>
    summarize(variant.scenario, variant.name, 'request', results.get(variant.path)!, { noDeadTuples: true }),
  );
}
