/**
 * Several keys at once (issue 43, item 2) in a workload process of the fault schedule (`worker.ts`):
 * `run([k1, k2(, k3)], work, options)` over the hot keys — 2 or 3 of them in a random order, refusing (`'throw'`) or
 * waiting 300–2,000 ms. The work samples `isHeld()` of the whole set every 20 ms (the last time it saw every lease
 * held, taken before the call: local safety), makes one fenced write of every key in one `MultiLease.fenced()`
 * transaction (judged per key by the fenced-exclusion checks, like every lease's writes), and reports the keys, their
 * tokens and its held window (`multi`): no two multi-key holders may overlap on any key (checker-modes.ts).
 *
 * The negative control (`multiSkipLast`) takes every key but the last one (`useMultiKeyOrder('skip-last')`, a
 * test-only defect of the library): two sets sharing only their last key then run side by side.
 */
import { randomUUID } from 'node:crypto';
import type { EntityManager } from 'typeorm';
import { LeaseLostError, type MultiLease } from '../../libs/lease/src/index.js';
import { useMultiKeyOrder } from '../../libs/lease/src/internal.js';
import { recordWrite } from '../faults/support/history.js';
import type { WriteOutcome } from '../faults/support/protocol.js';
import { sleep } from '../support/sleep.js';
import type { Random } from './schedule.js';
import { config, leases, op, outcomeOf, phase, send, wall } from './worker-kit.js';

if (config.multiSkipLast) useMultiKeyOrder('skip-last');

/** A multi-key call on 2 or 3 distinct hot keys, in the order drawn. */
export async function multiRun(random: Random): Promise<void> {
  const keys: string[] = [];
  const count = random.int(2, 3);
  while (keys.length < count) {
    const key = random.pick(config.hotKeys);
    if (!keys.includes(key)) keys.push(key);
  }
  const waits = random.chance(0.6);
  let ran = false;
  try {
    await leases.run(keys, (lease) => ((ran = true), held(lease, [...keys].sort(), random)), {
      onBusy: waits ? { wait: { timeoutMs: random.int(300, 2_000) } } : 'throw',
    });
    op('multi', 'granted');
  } catch (error) {
    op('multi', ran ? 'work-failed' : outcomeOf(error), { error });
  }
}

/** The work of a multi-key lease: its held window sampled, a moment of work, one fenced write of every key. */
async function held(lease: MultiLease, keys: readonly string[], random: Random): Promise<void> {
  const startedAt = wall();
  let lastHeldAt: number | undefined;
  const sample = () => {
    const at = wall();
    if (lease.isHeld()) lastHeldAt = at;
  };
  sample();
  const sampler = setInterval(sample, 20);
  try {
    await phase('holding', lease.leases[0]);
    await sleep(random.int(20, 300), lease.signal).catch(() => undefined);
    sample();
    await fencedWriteAll(lease);
  } finally {
    clearInterval(sampler);
    // The keys asked (in the global order): a key the call did not take is still one it claims to hold.
    const fencingTokens = keys.map((key) => lease.fencingTokens.get(key)?.toString() ?? 'none');
    send({ t: 'multi', keys: [...keys], fencingTokens, startedAt, lastHeldAt });
  }
}

/** One fenced transaction writing the history row and counter of every key (refused as a whole if one is stale). */
async function fencedWriteAll(lease: MultiLease): Promise<void> {
  const afterLoss = lease.signal.aborted && lease.signal.reason instanceof LeaseLostError;
  const writes = lease.leases.map((one) => ({ opId: randomUUID(), lease: one }));
  let outcome: WriteOutcome;
  let error: string | undefined;
  try {
    await lease.fenced(async (manager: EntityManager) => {
      for (const { opId, lease: one } of writes) {
        await recordWrite(manager, {
          opId,
          target: one.targetKey,
          fencingToken: one.fencingToken,
          worker: config.name,
        });
      }
    });
    outcome = 'ack';
  } catch (caught) {
    outcome = caught instanceof LeaseLostError ? 'refused' : 'unknown';
    error = String(caught).slice(0, 300);
  }
  for (const { opId, lease: one } of writes) {
    const fencingToken = one.fencingToken.toString();
    send({ t: 'write', opId, key: one.targetKey, fencingToken, outcome, afterLoss, error });
  }
}
