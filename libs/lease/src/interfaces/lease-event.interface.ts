/** What `LeaseService.events$` emits. Tokens never appear in events (they prove ownership); fencing tokens do. */
export type LeaseEvent =
  | { type: 'acquired'; targetKey: string; fencingToken: bigint; priority: number; owner: string; at: Date }
  | {
      type: 'taken-over';
      targetKey: string;
      fencingToken: bigint;
      priority: number;
      owner: string;
      previousOwner: string | null;
      at: Date;
    }
  | { type: 'renewed'; targetKey: string; fencingToken: bigint; latencyMs: number; at: Date }
  | { type: 'renew-failed'; leases: number; error: string; latencyMs: number; at: Date }
  | {
      type: 'lost';
      targetKey: string;
      fencingToken: bigint;
      reason: 'taken-over' | 'renewal-deadline' | 'failover';
      at: Date;
    }
  | { type: 'released'; targetKey: string; fencingToken: bigint; heldMs: number; at: Date }
  | { type: 'busy'; targetKey: string; at: Date }
  | { type: 'waiting'; targetKey: string; priority: number; at: Date }
  | {
      type: 'wait-ended';
      targetKey: string;
      priority: number;
      outcome: 'granted' | 'timeout' | 'aborted' | 'error';
      waitedMs: number;
      at: Date;
    };

export type LeaseEventType = LeaseEvent['type'];

/** One row of `LeaseService.list()`: a holder or a waiter. Ages come from the database clock. */
export interface LeaseSnapshot {
  targetKey: string;
  state: 'held' | 'waiting';
  owner: string;
  /** True when the row belongs to this process's LeaseService. */
  mine: boolean;
  priority: number;
  /** Waiters: priority plus aging (equal to priority when `agingIntervalMs` is off); grant order follows it. */
  effectivePriority: number;
  /** Holders only. */
  fencingToken?: bigint;
  /** Waiters only: 1 = granted next (among live waiters of the target). Dead waiters have no position. */
  position?: number;
  /** Since acquisition (holders) or first queueing (waiters). */
  ageMs: number;
  /** Since the last heartbeat. */
  sinceHeartbeatMs: number;
  /** The holder's lease timeout, or the waiter timeout. */
  timeoutMs: number;
  /** False for an expired lease or a dead waiter. */
  live: boolean;
}

/** Options of `LeaseService.tryAcquire()`. */
export interface TryAcquireOptions {
  /** Higher is served first. Giving it (or waitTimeoutMs) makes `acquire`/`run` wait in line. @default 0 */
  priority?: number;
  /**
   * The target stays taken until this long after the acquisition (database clock), even once released — with no
   * heartbeat for that tail. For jobs that must run once per tick across instances (ShedLock's `lockAtLeastFor`):
   * an instance whose timer fires a few milliseconds late finds the target still taken. A non-negative integer, at
   * most 2147483647. @default 0
   */
  holdAtLeastMs?: number;
}

/** Options of `LeaseService.acquire()` and `run()`. */
export interface AcquireOptions extends TryAcquireOptions {
  /** How long to wait in line. @default defaultWaitTimeoutMs of the module */
  waitTimeoutMs?: number;
  /** Aborts the wait (the rejection is the signal's reason); the waiter row is removed first. */
  signal?: AbortSignal;
}
