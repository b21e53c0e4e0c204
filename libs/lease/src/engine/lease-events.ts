/**
 * The events the engine emits about one held lease or one wait (over PostgreSQL or the testing kit's memory backend),
 * built once: what a unit test on the in-memory service observes is what production emits.
 */
import type { LeaseEvent, LeaseEventType } from '../interfaces/lease-event.interface.js';
import type { LeaseLossReason } from '../interfaces/lease-loss-reason.interface.js';

/** Where the engine's parts send events: they ask `hears(type)` first, and build nothing nobody listens to. */
export interface EventSink {
  hears(type: LeaseEventType): boolean;
  emit(event: LeaseEvent): void;
}

/** What a lease event names of its lease. */
interface EventLease {
  readonly targetKey: string;
  readonly keyTemplate: string;
  readonly fencingToken: bigint;
  /** A semaphore's slot (`limit` above 1). */
  readonly slot?: number;
  /** A read-write lease's mode. */
  readonly mode?: 'shared' | 'exclusive';
}

/**
 * Adds to `event` its lease's slot, when it is a semaphore's, and its mode, when it is a read-write lease's, then
 * `at`. Built in place, not spread: a grant's and a release's events are on every call's path.
 */
function stamped(event: Record<string, unknown>, lease: EventLease): LeaseEvent {
  if (lease.slot !== undefined) event.slot = lease.slot;
  if (lease.mode !== undefined) event.mode = lease.mode;
  event.at = new Date();
  return event as unknown as LeaseEvent;
}

/** What a wait event names of its call. */
interface EventCall {
  readonly targetKey: string;
  readonly keyTemplate: string;
  readonly priority: number;
}

export function releasedEvent(lease: EventLease, heldMs: number): LeaseEvent {
  const { targetKey, keyTemplate, fencingToken } = lease;
  return stamped({ type: 'released', targetKey, keyTemplate, fencingToken, heldMs }, lease);
}

export function lostEvent(lease: EventLease, reason: Exclude<LeaseLossReason, 'released'>, heldMs: number): LeaseEvent {
  const { targetKey, keyTemplate, fencingToken } = lease;
  return stamped({ type: 'lost', targetKey, keyTemplate, fencingToken, reason, heldMs }, lease);
}

export function waitEndedEvent(
  call: EventCall,
  outcome: 'granted' | 'timeout' | 'aborted' | 'error',
  waitedMs: number,
): LeaseEvent {
  const { targetKey, keyTemplate, priority } = call;
  return { type: 'wait-ended', targetKey, keyTemplate, priority, outcome, waitedMs, at: new Date() };
}

/** A grant's event: `taken-over` when it took an expired row over (naming its previous owner), else `acquired`. */
export function grantedEvent(
  lease: EventLease,
  priority: number,
  owner: string,
  takeover?: { previousOwner: string | null },
): LeaseEvent {
  const { targetKey, keyTemplate, fencingToken } = lease;
  const type = takeover ? 'taken-over' : 'acquired';
  const event = stamped({ type, targetKey, keyTemplate, fencingToken, priority, owner }, lease);
  if (takeover) (event as { previousOwner?: string | null }).previousOwner = takeover.previousOwner;
  return event;
}

/** What a `preempted` event names of the grant the preemptor ended. */
export interface EndedGrant {
  readonly fencingToken: bigint;
  readonly priority: number;
  readonly owner: string;
}

/** A preempting call's grant (`lease`, at `priority`, by `owner`) that ended `previous` (docs/preemption.md). */
export function preemptedEvent(
  lease: EventLease,
  priority: number,
  owner: string,
  previous: EndedGrant,
  forced: boolean,
  waitedMs: number,
): LeaseEvent {
  const { targetKey, keyTemplate, fencingToken } = lease;
  return {
    type: 'preempted',
    targetKey,
    keyTemplate,
    fencingToken,
    previousFencingToken: previous.fencingToken,
    priority,
    previousPriority: previous.priority,
    owner,
    previousOwner: previous.owner,
    forced,
    waitedMs,
    at: new Date(),
  };
}
