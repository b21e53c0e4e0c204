/** What the store's methods take and return, and the rows of its batch statements. */

/** A lease row (see options/slot-limits.ts). */
export type { RowRef } from '../options/slot-limits.js';

/** A held lease's row as a renewal names it, with the lease length its row keeps (absent: the module's). */
export interface RenewedRow {
  readonly targetKey: string;
  readonly slot: number;
  readonly leaseTimeoutMs?: number;
}

/** What one batched renewal found, by lease token (tokens in none of the sets are lost: another token, or no row). */
export interface RenewResult {
  /** Renewed. */
  kept: Set<string>;
  /** Still ours and live, but the row is locked (by a fenced transaction of ours, say): neither renewed nor lost. */
  skipped: Set<string>;
  /** Still carrying our token but expired by the database clock: never revived. */
  expired: Set<string>;
  /** Freed by an operator (`LeaseOperator.forceRelease`) and not acquired since: lost, `released-by-operator`. */
  forced?: Set<string>;
  /** Asked to stop by a preempting caller, or taken over by it (docs/preemption.md): lost, `preempted`. */
  preempted?: Set<string>;
  /**
   * Acquired under another history of the database than the server now has (a failover): not renewed, lost. Set
   * only when the renewal was given the leases' history (see `LeaseStore.renew`).
   */
  failover?: Set<string>;
  /** What the server said of its history, when it was asked. */
  history?: ServerHistory;
}

/**
 * Where a server stands in the history of its data: a promoted standby starts a new timeline, and a server in
 * recovery (a standby) can neither grant nor renew. Read by any role on PostgreSQL ≥ 15.
 */
export interface ServerHistory {
  /** A standby, or a server still replaying WAL: read-only. */
  recovery: boolean;
  /** The timeline of the server's WAL (null in recovery, where the current WAL position is not defined). */
  timeline: bigint | null;
  /**
   * `system_identifier` of `pg_control_system()` (set by initdb; the same on a primary and its standbys; another
   * value means another database cluster). Null where the role may not call the function.
   */
  systemId: string | null;
}

/** What a renewal compares with the server's history (see `LeaseStore.renew`). */
export interface LeaseHistory {
  /** The leases' fencing tokens, in the order of the lease tokens: each carries the timeline it was drawn in. */
  fencingTokens: bigint[];
  /** The system identifier the leases were acquired under (null: unknown, not compared). */
  systemId: string | null;
}

export interface AcquireRequest {
  targetKey: string;
  leaseToken: string;
  priority: number;
  /** The caller's waiter row, when it is queued: it may pass only waiters queued behind it. */
  waiterId?: string;
  waiterSeq?: bigint;
  /** The target stays taken until this long after the acquisition, even once released (0: no hold). */
  holdMs: number;
  /** The call's own lease length (its row's `lease_timeout_ms`); absent: the module's `leaseTimeoutMs`. */
  leaseTimeoutMs?: number;
  /**
   * Queue the caller under this new waiter id when it is refused, in the same statement (the first attempt of a
   * call that will wait). Such an attempt is never batched.
   */
  queueAs?: {
    waiterId: string;
  };
}

/** One caller of a release batch. */
export interface ReleaseItem {
  targetKey: string;
  leaseToken: string;
  timeoutMs: number;
  /** See `AcquiredRow.lone`. */
  lone?: boolean;
}

export interface AcquiredRow {
  fencingToken: bigint;
  /** Monotonic time the statement was sent (after waiting for a pooled connection): the lease counts from here. */
  sentAt: number;
  /** The row existed (expired) and was taken over, rather than inserted fresh. */
  tookOver: boolean;
  previousOwner: string | null;
  /** Won by the lone caller's statement (no waiter line then): its release tries the lean statement first. */
  lone?: boolean;
}

/** A refused attempt; `holdLeftMs` is set when the target is free but for the hold of its last acquisition. */
export interface Refusal {
  readonly refused: true;
  readonly holdLeftMs: number | null;
  /** With `queueAs`: the caller's place in line, or null when the line was full (`maxWaitersPerTarget`). */
  readonly place?: WaiterPlace | null;
  /** With a place: a live waiter was ahead of the caller when it was queued (unknown: treated as false). */
  readonly behind?: boolean;
}

/** A granted slot: the acquisition, and the slot of its row (1 … limit, see options/slot-limits.ts). */
export interface AcquiredSlot extends AcquiredRow {
  readonly rowSlot: number;
}

/** A refused slot acquisition; `heldLimit`: another limit holds the key (a single holder counts as 1). */
export interface SlotRefusal extends Refusal {
  readonly heldLimit: number | null;
}

export interface WaiterPlace {
  seq: bigint;
  queuedAt: Date;
}

/** The waiter a release queues for its own process when it hands the key over (see `LeaseStore.releaseAndPark`). */
export interface ParkRequest {
  readonly waiterId: string;
  readonly priority: number;
}

/** A release that may have queued its caller: whether it released, and the parked place (null: none). */
export interface ParkedRelease {
  readonly released: boolean;
  readonly place: WaiterPlace | null;
}

export interface SnapshotRow {
  state: 'held' | 'waiting';
  target_id: string;
  /** A holder's row slot (0: the key's own; 1 … limit: a semaphore's); null for a waiter. */
  slot: number | null;
  /** A holder's row's limit (`slot_limit`: a semaphore's; 0 a reader's, -1 a writer's; null the key's own). */
  slot_limit?: number | null;
  owner: string;
  priority: number;
  effective_priority: string;
  fencing_token: string | null;
  seq: string | null;
  age_ms: number;
  since_heartbeat_ms: number;
  timeout_ms: number;
}

/** One caller of an acquire batch. */
export interface AcquireBatchItem {
  i: number;
  target_id: string;
  lease_token: string;
  priority: number;
  waiter_id: string | null;
  /** bigint as a decimal string */
  waiter_seq: string | null;
  hold_ms: number;
  /** The call's own lease length; null: the statement's (the module's). */
  lease_timeout_ms: number | null;
}

/** What each caller of an acquire batch gets back, by its position `i` (1-based). */
export interface AcquireBatchRow {
  i: number;
  /** `retry`: the row was locked by another transaction, or taken between the pre-check and the lock. */
  outcome: 'won' | 'refused' | 'retry';
  fencing_token: string | null;
  took_over: boolean | null;
  previous_owner: string | null;
  hold_left_ms: number | null;
}
