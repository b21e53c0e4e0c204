/**
 * Phases, rounds and their summary. A phase opens its own connections, warms them up, runs the measured window and
 * closes everything, so table counters can be read exactly afterwards (a backend publishes them when it exits).
 * Implementations alternate within a round and the order flips every round (A B C, C B A, …), so a noisy
 * neighbour on the shared CPUs hurts all of them alike; the summary takes medians.
 */
import { statementsSoFar, type BenchDatabase } from './db.js';

export interface RunResult {
  /** Operations in the measured window. */
  ops: number;
  elapsedMs: number;
  /** One sample per operation (for handoffs: release → grant). */
  latenciesMs: number[];
  /** When only percentiles are known (autocannon): summarised by median over rounds. */
  percentilesMs?: { p50: number; p99: number };
  /** Scenario-specific figures, summarised by median over rounds. */
  extra?: Record<string, number>;
}

export interface Workload {
  /** Opens connections and warms them up (prepared statements); returns how many table writes the warm-up made. */
  setup(): Promise<number>;
  run(): Promise<RunResult>;
  /** Closes every connection the workload opened, even after a failed setup. */
  teardown(): Promise<void>;
}

export interface Measurement extends RunResult {
  statements: number;
  /** Transactions that were given an id, i.e. that wrote something. */
  writeTransactions: number;
  /** CPU time of this Node process (user + system) during the window; NaN where the work runs elsewhere. */
  clientCpuUs: number;
  walBytes: number;
  deadTuples: number;
  updates: number;
  hotUpdates: number;
  /** Operations that touched the tables, warm-up included: the denominator of the table counters. */
  tableOps: number;
}

export async function measure(db: BenchDatabase, workload: Workload): Promise<Measurement> {
  await db.vacuum();
  const before = await db.tableCounters();
  let warmOps: number;
  let result: RunResult;
  let statements: number;
  let walBytes: number;
  let writeTransactions: number;
  let clientCpuUs: number;
  try {
    warmOps = await workload.setup();
    const statements0 = statementsSoFar();
    const wal0 = await db.walPosition();
    const xid0 = await db.nextTransactionId();
    const cpu0 = process.cpuUsage();
    result = await workload.run();
    const cpu = process.cpuUsage(cpu0);
    clientCpuUs = cpu.user + cpu.system;
    statements = statementsSoFar() - statements0;
    walBytes = Number((await db.walPosition()) - wal0);
    writeTransactions = Number((await db.nextTransactionId()) - xid0);
  } finally {
    await workload.teardown();
  }
  const after = await db.tableCounters();
  return {
    ...result,
    statements,
    writeTransactions,
    clientCpuUs,
    walBytes,
    deadTuples: after.deadTuples - before.deadTuples,
    updates: after.updates - before.updates,
    hotUpdates: after.hotUpdates - before.hotUpdates,
    tableOps: warmOps + result.ops,
  };
}

export interface Contender {
  name: string;
  workload: (round: number) => Workload;
}

/** Runs every contender once per round, flipping the order each round. */
export async function interleaved(
  db: BenchDatabase,
  rounds: number,
  contenders: Contender[],
  log: (line: string) => void,
): Promise<Map<string, Measurement[]>> {
  const results = new Map<string, Measurement[]>(contenders.map((contender) => [contender.name, []]));
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? contenders : [...contenders].reverse();
    for (const contender of order) {
      const measurement = await measure(db, contender.workload(round));
      results.get(contender.name)!.push(measurement);
      log(
        `    round ${round + 1}/${rounds} ${contender.name}: ${measurement.ops} ops, p50 ${fixed(percentile(measurement.latenciesMs, 50), 3)} ms`,
      );
    }
  }
  return results;
}

/** `clients` concurrent loops of `perClient` operations; one latency sample per operation. */
export async function loops(
  clients: number,
  perClient: number,
  op: (client: number, i: number) => Promise<void>,
): Promise<RunResult> {
  const latenciesMs: number[] = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async (_, client) => {
      for (let i = 0; i < perClient; i++) {
        const t0 = performance.now();
        await op(client, i);
        latenciesMs.push(performance.now() - t0);
      }
    }),
  );
  return { ops: clients * perClient, elapsedMs: performance.now() - started, latenciesMs };
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

export function median(values: number[]): number {
  return percentile(values, 50);
}

export function fixed(value: number | null | undefined, digits: number): string {
  return value === null || value === undefined || Number.isNaN(value) ? '—' : value.toFixed(digits);
}

export interface Row {
  scenario: string;
  implementation: string;
  /** What one operation is. */
  unit: string;
  rounds: number;
  ops: number;
  /** Median over rounds; null where the pace is set by a timer (heartbeat ticks). */
  opsPerSec: number | null;
  p50Ms: number;
  p99Ms: number;
  roundTripsPerOp: number;
  /** Transactions that wrote, per operation: each is a commit (a WAL flush when synchronous). */
  writeTransactionsPerOp: number;
  /** CPU of the benchmark's Node process per operation, in µs: the client-side cost (driver, library). */
  clientCpuUsPerOp: number;
  walBytesPerOp: number;
  /** n_dead_tup left behind per operation; null where not meaningful. */
  deadTuplesPerOp: number | null;
  /** n_tup_hot_upd / n_tup_upd; null when there were no updates. */
  hotShare: number | null;
  extra: Record<string, number>;
}

/** Percentile of all samples pooled over rounds, or the median of per-round percentiles when only those exist. */
function latency(rounds: Measurement[], p: 50 | 99): number {
  const samples = rounds.flatMap((m) => m.latenciesMs);
  if (samples.length > 0) return percentile(samples, p);
  return median(rounds.map((m) => m.percentilesMs?.[`p${p}`] ?? Number.NaN));
}

export function summarize(
  scenario: string,
  implementation: string,
  unit: string,
  rounds: Measurement[],
  options: { paced?: boolean; noDeadTuples?: boolean } = {},
): Row {
  const ratioPerRound = (pick: (m: Measurement) => number, per: (m: Measurement) => number) =>
    median(rounds.map((m) => pick(m) / Math.max(1, per(m))));
  const updates = rounds.reduce((sum, m) => sum + m.updates, 0);
  const extraKeys = [...new Set(rounds.flatMap((m) => Object.keys(m.extra ?? {})))];
  return {
    scenario,
    implementation,
    unit,
    rounds: rounds.length,
    ops: rounds.reduce((sum, m) => sum + m.ops, 0),
    opsPerSec: options.paced ? null : median(rounds.map((m) => (m.ops * 1000) / m.elapsedMs)),
    p50Ms: latency(rounds, 50),
    p99Ms: latency(rounds, 99),
    roundTripsPerOp: ratioPerRound(
      (m) => m.statements,
      (m) => m.ops,
    ),
    writeTransactionsPerOp: ratioPerRound(
      (m) => m.writeTransactions,
      (m) => m.ops,
    ),
    clientCpuUsPerOp: ratioPerRound(
      (m) => m.clientCpuUs,
      (m) => m.ops,
    ),
    walBytesPerOp: ratioPerRound(
      (m) => m.walBytes,
      (m) => m.ops,
    ),
    deadTuplesPerOp: options.noDeadTuples
      ? null
      : ratioPerRound(
          (m) => m.deadTuples,
          (m) => m.tableOps,
        ),
    hotShare: updates === 0 ? null : rounds.reduce((sum, m) => sum + m.hotUpdates, 0) / updates,
    extra: Object.fromEntries(
      extraKeys.map((key) => [
        key,
        median(rounds.map((m) => m.extra?.[key] ?? Number.NaN).filter((v) => !Number.isNaN(v))),
      ]),
    ),
  };
}

export interface BenchContext {
  db: BenchDatabase;
  quick: boolean;
  log: (line: string) => void;
}
