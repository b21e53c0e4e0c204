/**
 * `fenced()`: the lease row locked and its token checked in the transaction that runs the work, and nested `fenced()`
 * calls of the same lease joined in savepoints. Its collaborators are given explicitly: the backend's fence (a
 * transaction that opens with the row's lock and may close with its release) and `lose` (the engine's loss of a lease).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { EntityManager } from 'typeorm';
import { isLockStepRetryable, unavailableOr } from '../errors/database-errors.js';
import { LeaseArgumentError, LeaseLostError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { FencedOptions } from '../interfaces/lease.interface.js';
import type { LeaseLossReason } from '../interfaces/lease-loss-reason.interface.js';
import { SERIALIZATION_ATTEMPTS } from '../options/limits.js';
import type { FenceBackend } from '../core/backend.js';
import type { HeldLease } from './held-lease.js';
import { fencedAll } from './multi-fence.js';

/** How the engine loses a lease (its signal, its event, its log line). */
export type LoseLease = (lease: HeldLease, reason: Exclude<LeaseLossReason, 'released'>, detail?: string) => void;

/**
 * Where one attempt of a fenced transaction is: the row is locked (a failure before is the connection's or the lock
 * step's, sent with BEGIN); `work` is running (what fails is the work's).
 */
interface FenceStep {
  locked: boolean;
  inWork: boolean;
}

/** How the engine ends a lease whose release committed with a fenced transaction (no statement of its own). */
export type ReleasedBySave = (lease: HeldLease) => void;

/** A fenced transaction open in the current call chain: nested `fenced()` calls on its lease join it. */
interface OpenFence {
  readonly manager: EntityManager;
  /** Nested parts run one at a time (each in a savepoint on the one connection). */
  queue: Promise<unknown>;
  closed: boolean;
}

export class FencedTransactions {
  private readonly fences = new AsyncLocalStorage<ReadonlyMap<HeldLease, OpenFence>>();

  constructor(
    private readonly fence: FenceBackend,
    private readonly lose: LoseLease,
    private readonly releasedBySave: ReleasedBySave,
  ) {}

  /**
   * The lease's `fenced()`: lock the row, check the token, run `work` in the same transaction. A `fenced()`
   * of the same lease called from inside `work` joins that transaction in a savepoint: a second transaction would wait
   * for the first's row lock while the first waits for it in JavaScript, a deadlock PostgreSQL cannot see.
   */
  async fenced<T>(
    lease: HeldLease,
    work: (manager: EntityManager) => Promise<T>,
    options: FencedOptions = {},
  ): Promise<T> {
    const release = releaseOption(options, lease.targetKey);
    if (!lease.isHeld()) throw this.refuse(lease);
    const open = this.fences.getStore()?.get(lease);
    if (open && !open.closed) {
      if (release) throw new LeaseArgumentError(messages.releaseInOpenFence(), lease.targetKey);
      return this.joinFence(lease, open, work);
    }
    // Under a serializable (or repeatable read) server default, locking a row a heartbeat has just renewed fails with
    // 40001; nothing of `work` has run yet, so the transaction simply starts again.
    // So is a lock step whose prepared statements the application deallocated on that connection (they are prepared
    // again). Only the lock step is retried: a serialization failure inside the user's work is the user's to handle.
    for (let attempt = 1; ; attempt++) {
      const step: FenceStep = { locked: false, inWork: false };
      try {
        const result = await this.fencedOnce(lease, work, step, release);
        // Committed: the row was released with the work's writes.
        if (release) this.releasedBySave(lease);
        return result;
      } catch (error) {
        // A serialization failure (or a forgotten statement) before the row is locked can only be the lock step's.
        if (step.locked || attempt >= SERIALIZATION_ATTEMPTS || !isLockStepRetryable(error)) {
          // The database failing around the work (its connection, BEGIN and the lock, COMMIT) is the library's 503;
          // what the work itself throws is the work's, unchanged.
          const operation = step.locked ? 'run the fenced transaction of' : 'lock the lease of';
          throw step.inWork ? error : unavailableOr(error, lease.targetKey, operation);
        }
        if (!lease.isHeld()) throw this.refuse(lease);
      }
    }
  }

  private fencedOnce<T>(
    lease: HeldLease,
    work: (manager: EntityManager) => Promise<T>,
    step: FenceStep,
    release: boolean,
  ): Promise<T> {
    // The row lock is waited for no longer than the lease may still be used (measured when the lock is sent).
    const lockWaitMs = () => lease.deadline - performance.now();
    return this.fence
      .transaction(lease.row, lockWaitMs, async (manager, locked) => {
        step.locked = true;
        const { leaseToken: token, timeline, forced, preemptOf } = locked;
        // A lease of another timeline never writes on this one: its row there may be older than its holder believes.
        const acquiredIn = this.fence.timelineOf(lease.fencingToken);
        if (timeline !== acquiredIn) {
          const detail = `timeline ${acquiredIn} → ${timeline}`;
          this.lose(lease, 'failover', detail);
          throw new LeaseLostError(lease.targetKey, 'failover', detail);
        }
        // Asked to stop by a preempting caller, or taken over by it: never a write of the holder from then on.
        if (token !== lease.token || preemptOf === lease.token) {
          const reason = preemptOf === lease.token ? 'preempted' : forced ? 'released-by-operator' : 'taken-over';
          this.lose(lease, reason);
          throw new LeaseLostError(lease.targetKey, reason);
        }
        step.inWork = true;
        let result: T;
        try {
          result = await this.withinFence(lease, manager, work);
        } finally {
          step.inWork = false;
        }
        // The row lock keeps others out until COMMIT; still, once we told the work the lease was lost, nothing of
        // it may commit.
        if (!lease.isHeld()) throw this.refuse(lease);
        if (!release) return { result };
        // The release rides on this transaction's COMMIT: the row lock is ours, so it cannot find another holder's token.
        lease.releasingWithSave = true;
        return { result, releaseToken: lease.token };
      })
      .finally(() => (lease.releasingWithSave = false));
  }

  /** Runs `work` with `manager` as the open fence of `lease` in this call chain. */
  private async withinFence<T>(
    lease: HeldLease,
    manager: EntityManager,
    work: (manager: EntityManager) => Promise<T>,
  ): Promise<T> {
    const fence: OpenFence = { manager, queue: Promise.resolve(), closed: false };
    const fences = new Map(this.fences.getStore());
    fences.set(lease, fence);
    try {
      return await this.fences.run(fences, () => work(manager));
    } finally {
      fence.closed = true;
    }
  }

  /** A nested part of an open fence: a savepoint on its connection; its failure rolls back only the part. */
  private joinFence<T>(lease: HeldLease, open: OpenFence, work: (manager: EntityManager) => Promise<T>): Promise<T> {
    const part = open.queue.then(() =>
      open.manager.transaction(async (inner) => {
        if (!lease.isHeld()) throw this.refuse(lease);
        return this.withinFence(lease, inner, work);
      }),
    );
    open.queue = part.catch(() => undefined);
    return part;
  }

  /**
   * `MultiLease.fenced()`: every row locked and every token checked by one statement, then `work` in that
   * transaction, as the open fence of each lease (a nested `fenced()` of one of them joins it). See multi-fence.ts.
   */
  fencedAll<T>(leases: readonly HeldLease[], work: (manager: EntityManager) => Promise<T>): Promise<T> {
    for (const lease of leases) {
      if (this.fences.getStore()?.get(lease)?.closed === false) {
        return Promise.reject(new LeaseArgumentError(messages.multiFenceNested(lease.targetKey), lease.targetKey));
      }
    }
    return fencedAll(
      { fence: this.fence, lose: this.lose, refuse: (lease) => this.refuse(lease) },
      leases,
      (manager) => {
        const fences = new Map(this.fences.getStore());
        const opened = leases.map((lease) => {
          const fence: OpenFence = { manager, queue: Promise.resolve(), closed: false };
          fences.set(lease, fence);
          return fence;
        });
        return this.fences
          .run(fences, () => work(manager))
          .finally(() => opened.forEach((fence) => (fence.closed = true)));
      },
    );
  }

  /**
   * A fenced write refused because the lease is not held. Past its deadline, the deadline timer may not have fired
   * yet (a process resumed from a pause runs its due timers in order): lose the lease now, so the signal, the 'lost'
   * event and the refusal agree.
   */
  refuse(lease: HeldLease): LeaseLostError {
    if (lease.active) this.lose(lease, 'renewal-deadline');
    return new LeaseLostError(lease.targetKey, lease.lossReason);
  }
}

/** `FencedOptions.release`, checked: anything but an object with an optional boolean is a LeaseArgumentError. */
function releaseOption(options: FencedOptions, targetKey: string): boolean {
  const release: unknown = typeof options === 'object' && options !== null ? options.release : 'invalid';
  if (release !== undefined && typeof release !== 'boolean') {
    throw new LeaseArgumentError(messages.fencedOptionsArgument(options), targetKey);
  }
  return release === true;
}
