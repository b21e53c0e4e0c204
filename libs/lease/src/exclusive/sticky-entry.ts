import { TurnLease } from '../engine/held-lease.js';
import type { LeaseEntry, ServiceEngine } from '../engine/service-engine.js';
import type { LeaderCandidates } from '../leader/candidates.js';
import { LeaseBusyError, LeaseShutdownError } from '../errors/lease.errors.js';
import type { ExclusiveMetadata } from '../options/busy-policy.js';

/** Marks the refusal of a call because another instance owns the key (`@Sticky` with `'wait'` skips those). */
const NOT_OWNER = Symbol('nest-pg-lease:not-owner');

/** Whether `error` refused a `@Sticky` call because another instance owns the key. */
export function refusedAsNotOwner(error: LeaseBusyError): boolean {
  return (error as { [NOT_OWNER]?: boolean })[NOT_OWNER] === true;
}

/**
 * A `@Sticky` call's lease: the term of this instance's owner candidate for the key (started by the first call,
 * which waits for its first attempt), kept across calls — `exit` leaves it held. One call at a time uses the term: a
 * call that overlaps a running one is busy, or waits in this process's line with `onBusy: 'wait'`
 * (`LeaseWaitTimeoutError` at its end); a call nested in a call of the key borrows its lease. Not the owner: busy
 * (marked: `refusedAsNotOwner`). Busy is a `LeaseBusyError` (a `busy` event), which `'skip'` turns into a skipped call.
 */
export async function stickyEntry(
  engine: ServiceEngine,
  candidates: LeaderCandidates,
  targetKey: string,
  metadata: ExclusiveMetadata,
  keyTemplate: string,
  signal?: AbortSignal,
): Promise<LeaseEntry> {
  signal?.throwIfAborted();
  const borrowed = engine.borrow(targetKey);
  if (borrowed) return { lease: borrowed, exit: () => Promise.resolve() };
  const owner = candidates.stickyOwner(targetKey, { priority: metadata.priority, keyTemplate });
  if (!owner) throw new LeaseShutdownError(targetKey);
  await owner.firstAttempt;
  const busy = (owned: boolean) => {
    if (engine.hears('busy')) engine.emit({ type: 'busy', targetKey, keyTemplate, at: new Date() });
    const error = new LeaseBusyError(targetKey, engine.options.heartbeatIntervalMs);
    if (!owned) Object.defineProperty(error, NOT_OWNER, { value: true });
    return error;
  };
  if (!owner.lease) throw busy(false);
  if (!owner.turns.tryTake()) {
    const { busy: policy } = metadata;
    if (policy.kind !== 'wait') throw busy(true);
    const waitTimeoutMs = policy.timeoutMs ?? engine.options.defaultWaitTimeoutMs;
    await owner.turns.take(targetKey, metadata.priority, waitTimeoutMs, signal);
  }
  // The term may have ended while the call waited for its turn.
  const lease = owner.lease;
  if (!lease) {
    owner.turns.give();
    throw busy(false);
  }
  // The call's own handle on the term: it ends with the call (see `TurnLease`), the term goes on.
  const turn = new TurnLease(lease);
  let left = false;
  const exit = () => {
    turn.end();
    if (!left) owner.turns.give();
    left = true;
    return Promise.resolve();
  };
  return { lease: turn, exit };
}
