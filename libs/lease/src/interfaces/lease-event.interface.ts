import type { LeadershipEndReason } from './leader-election.interface.js';

/**
 * What `LeaseService.events$` emits (and each event type's `node:diagnostics_channel`, see `LEASE_CHANNELS`). Tokens
 * never appear in events (they prove ownership); fencing tokens do. `keyTemplate` is what the key is an instance of
 * (`TryAcquireOptions.keyTemplate`; `@Exclusive`'s template): metrics label by it, never by the key.
 */
export type LeaseEvent =
  | {
      type: 'acquired';
      targetKey: string;
      keyTemplate: string;
      fencingToken: bigint;
      priority: number;
      owner: string;
      /** A semaphore's slot (`limit` above 1). */
      slot?: number;
      /** A read-write lease's mode (docs/read-write.md). */
      mode?: 'shared' | 'exclusive';
      at: Date;
    }
  | {
      type: 'taken-over';
      targetKey: string;
      keyTemplate: string;
      fencingToken: bigint;
      priority: number;
      owner: string;
      previousOwner: string | null;
      /** A semaphore's slot (`limit` above 1). */
      slot?: number;
      /** A read-write lease's mode (docs/read-write.md). */
      mode?: 'shared' | 'exclusive';
      at: Date;
    }
  | { type: 'renewed'; targetKey: string; keyTemplate: string; fencingToken: bigint; latencyMs: number; at: Date }
  | { type: 'renew-failed'; leases: number; error: string; latencyMs: number; at: Date }
  | {
      type: 'lost';
      targetKey: string;
      keyTemplate: string;
      fencingToken: bigint;
      reason: 'taken-over' | 'renewal-deadline' | 'failover' | 'released-by-operator' | 'preempted';
      /** Since the acquisition, until the loss. */
      heldMs: number;
      /** A semaphore's slot (`limit` above 1). */
      slot?: number;
      /** A read-write lease's mode (docs/read-write.md). */
      mode?: 'shared' | 'exclusive';
      at: Date;
    }
  | {
      type: 'released';
      targetKey: string;
      keyTemplate: string;
      fencingToken: bigint;
      heldMs: number;
      /** A semaphore's slot (`limit` above 1). */
      slot?: number;
      /** A read-write lease's mode (docs/read-write.md). */
      mode?: 'shared' | 'exclusive';
      at: Date;
    }
  | {
      /**
       * This process's preempting call (`preempt: true`) got the target from a holder of lower priority: the holder
       * released in its grace (`forced: false`), or was taken over at its end (`forced: true`). Emitted after the
       * call's `acquired` event.
       */
      type: 'preempted';
      targetKey: string;
      keyTemplate: string;
      /** The preemptor's grant. */
      fencingToken: bigint;
      /** The grant it ended. */
      previousFencingToken: bigint;
      priority: number;
      previousPriority: number;
      owner: string;
      previousOwner: string;
      forced: boolean;
      /** From the request to the grant. */
      waitedMs: number;
      at: Date;
    }
  | { type: 'busy'; targetKey: string; keyTemplate: string; at: Date }
  | { type: 'waiting'; targetKey: string; keyTemplate: string; priority: number; at: Date }
  | {
      type: 'wait-ended';
      targetKey: string;
      keyTemplate: string;
      priority: number;
      outcome: 'granted' | 'timeout' | 'aborted' | 'error';
      waitedMs: number;
      at: Date;
    }
  | {
      /** A leader-election candidate (`elect()`, `@LeaderElection`, `@Sticky`) began a term. */
      type: 'elected';
      targetKey: string;
      keyTemplate: string;
      /** The term: rises with every change of leader. */
      fencingToken: bigint;
      priority: number;
      at: Date;
    }
  | {
      /** A leader's term ended (after its lease was released or lost). */
      type: 'revoked';
      targetKey: string;
      keyTemplate: string;
      fencingToken: bigint;
      reason: LeadershipEndReason;
      heldMs: number;
      at: Date;
    }
  | {
      /**
       * One acquisition call ended (`tryAcquire`, `acquire`, `run`, `@Exclusive`; not a reentrant one), however it
       * ended: `durationMs` from the call to its outcome, a wait in line included.
       */
      type: 'acquire-ended';
      targetKey: string;
      keyTemplate: string;
      priority: number;
      outcome: AcquireOutcome;
      durationMs: number;
      at: Date;
    };

export type LeaseEventType = LeaseEvent['type'];

/** How an acquisition call ended (`acquire-ended` events; the `lease.acquire` span's `lease.outcome`). */
export type AcquireOutcome =
  | 'acquired'
  | 'taken-over'
  | 'busy'
  | 'drained'
  | 'timeout'
  | 'aborted'
  | 'queue-full'
  | 'shutdown'
  | 'unavailable'
  | 'error';

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
  /** Holders only. In JSON (`JSON.stringify`, a controller answering `list()`): a decimal string. */
  fencingToken?: bigint;
  /** Holders of a semaphore (`limit` above 1) only: the slot held (0 … limit − 1). */
  slot?: number;
  /** Holders of a read-write lease only (docs/read-write.md): a reader's (`'shared'`) or the writer's. */
  mode?: 'shared' | 'exclusive';
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
