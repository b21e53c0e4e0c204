/**
 * `MultiLease.fenced()`: one transaction that opens with one statement locking every lease row of a multi-key run, in
 * the run's global key order (two such transactions over overlapping keys never wait for each other in a cycle), and
 * checks every token before the work's first statement. A stale token of any key refuses the whole write, as a
 * single lease's `fenced()` refuses: `LeaseLostError`, nothing written, the lease lost.
 */
import type { EntityManager } from 'typeorm';
import { isLockStepRetryable, unavailableOr } from '../errors/database-errors.js';
import { LeaseLostError } from '../errors/lease.errors.js';
import { SERIALIZATION_ATTEMPTS } from '../options/limits.js';
import type { FenceBackend, FenceLock } from '../core/backend.js';
import type { HeldLease } from './held-lease.js';
import type { LeaseLossReason } from '../interfaces/lease-loss-reason.interface.js';

/** What the multi-row fence needs of the single-row one (`FencedTransactions`). */
export interface FenceHost {
  readonly fence: FenceBackend;
  /** The engine's loss of a lease (`LoseLease` of fenced-transaction.ts). */
  readonly lose: (lease: HeldLease, reason: Exclude<LeaseLossReason, 'released'>, detail?: string) => void;
  /** A write refused because `lease` is not held (the loss made now when its deadline passed). */
  refuse(lease: HeldLease): LeaseLostError;
}

/** The lock step's verdict on one lease, as `FencedTransactions.fencedOnce` judges a single one. */
function check(host: FenceHost, lease: HeldLease, locked: FenceLock | undefined): void {
  const { leaseToken = null, timeline = -1n, forced = false, preemptOf = null } = locked ?? {};
  const acquiredIn = host.fence.timelineOf(lease.fencingToken);
  if (timeline !== acquiredIn) {
    const detail = `timeline ${acquiredIn} → ${timeline}`;
    host.lose(lease, 'failover', detail);
    throw new LeaseLostError(lease.targetKey, 'failover', detail);
  }
  if (leaseToken !== lease.token || preemptOf === lease.token) {
    const reason = preemptOf === lease.token ? 'preempted' : forced ? 'released-by-operator' : 'taken-over';
    host.lose(lease, reason);
    throw new LeaseLostError(lease.targetKey, reason);
  }
}

/**
 * Runs `work` in a transaction holding every row's lock, each token checked. `leases` are in the run's key order.
 * Only the lock step is retried on a serialization failure or a forgotten prepared statement (nothing of `work` has
 * run then), as for a single lease.
 */
export async function fencedAll<T>(
  host: FenceHost,
  leases: readonly HeldLease[],
  work: (manager: EntityManager) => Promise<T>,
): Promise<T> {
  const refuseUnheld = () => {
    const unheld = leases.find((lease) => !lease.isHeld());
    if (unheld) throw host.refuse(unheld);
  };
  refuseUnheld();
  // The row locks are waited for no longer than the first lease to lapse may still be used.
  const lockWaitMs = () => Math.min(...leases.map((lease) => lease.deadline)) - performance.now();
  const first = leases[0].targetKey;
  for (let attempt = 1; ; attempt++) {
    const step = { locked: false, inWork: false };
    try {
      return await host.fence.transactionAll(
        leases.map((lease) => lease.row),
        lockWaitMs,
        async (manager, locks) => {
          step.locked = true;
          leases.forEach((lease, at) => check(host, lease, locks[at]));
          step.inWork = true;
          let result: T;
          try {
            result = await work(manager);
          } finally {
            step.inWork = false;
          }
          // Once the work was told a lease was lost, nothing of it may commit.
          refuseUnheld();
          return result;
        },
      );
    } catch (error) {
      if (step.locked || attempt >= SERIALIZATION_ATTEMPTS || !isLockStepRetryable(error)) {
        const operation = step.locked ? 'run the fenced transaction of' : 'lock the leases of';
        throw step.inWork ? error : unavailableOr(error, first, operation);
      }
      refuseUnheld();
    }
  }
}
