/** A waiting call of this process, as the priority line (`WaitQueue`) and its parked places keep it. */
import type { WaiterPlace } from '../core/backend.js';
import type { LeaseRequest } from '../options/call-input.js';

/** What a waiter is made of: its call's request. */
export type WaiterRequest = Pick<LeaseRequest, 'targetKey' | 'priority' | 'holdMs' | 'keyTemplate' | 'leaseTimeoutMs'>;

/** One waiting call of this process. */
export interface Waiter {
  readonly id: string;
  readonly targetKey: string;
  readonly priority: number;
  /** holdAtLeastMs of the lease it waits for. */
  readonly holdAtLeastMs: number;
  /** The call's key template (traces, metrics). */
  readonly keyTemplate?: string;
  /** The call's own lease length (absent: the module's): its grant's row and its lease keep it. */
  readonly leaseTimeoutMs?: number;
  place?: WaiterPlace;
  /** Set by a refused attempt when only a hold's tail is in the way: it ends in this many ms (no NOTIFY then). */
  holdLeftMs?: number;
  /** Set when a heartbeat found the row gone (evicted as dead while this process was slow): re-queue at `place`. */
  evicted: boolean;
  /** A wake-up arrived (NOTIFY, eviction, reconnect) since the last attempt. */
  pending: boolean;
  /** Ends the current sleep, if any. */
  wake?: () => void;
  /**
   * The fencing token of a grant a release handed this waiter (direct handoff: the NOTIFY carried it); the next
   * attempt confirms it instead of acquiring. Its lease token is the waiter id.
   */
  granted?: bigint;
  /** Set by a first attempt that queued it behind a live waiter (see `inLine`: no second look then). */
  queuedBehind?: boolean;
}
