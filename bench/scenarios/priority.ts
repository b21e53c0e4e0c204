/**
 * bench/priority-handoff.ts (release → grant between two processes, the waiter already asleep in line), folded into
 * the run: the wake-up path alone, with LISTEN/NOTIFY and with polling only, next to one durable commit.
 */
import { priorityHandoff } from '../priority-handoff.js';
import type { BenchContext, Row } from '../support/measure.js';

export const PRIORITY_SCENARIO = 'handoff to a sleeping waiter, 2 processes';

export async function priorityWakeUp(ctx: BenchContext): Promise<Row[]> {
  const handoffs = ctx.quick ? 50 : 200;
  ctx.log(`  ${PRIORITY_SCENARIO}: ${handoffs} handoffs per wake-up mode (bench/priority-handoff.ts)`);
  const { results, commitP50Ms } = await priorityHandoff(ctx.db.server.url, handoffs, 100);
  return results.map((result) => ({
    scenario: PRIORITY_SCENARIO,
    implementation:
      result.mode === 'notify'
        ? 'nest-pg-lease, LISTEN/NOTIFY'
        : `nest-pg-lease, poll only (${result.pollIntervalMs} ms)`,
    unit: 'handoff',
    rounds: 1,
    ops: result.handoffs,
    opsPerSec: null,
    p50Ms: result.p50Ms,
    p99Ms: result.p99Ms,
    roundTripsPerOp: Number.NaN,
    writeTransactionsPerOp: Number.NaN,
    clientCpuUsPerOp: Number.NaN,
    walBytesPerOp: Number.NaN,
    deadTuplesPerOp: null,
    hotShare: null,
    extra: { maxMs: result.maxMs, durableCommitP50Ms: commitP50Ms },
  }));
}
