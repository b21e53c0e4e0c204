import { TurnLease } from '../engine/held-lease.js';
import type { LeaseEntry, ServiceEngine } from '../engine/service-engine.js';
import { LeaseBusyError, LeaseShutdownError } from '../errors/lease.errors.js';
import type { ExclusiveMetadata } from '../interfaces/exclusive-options.interface.js';
import { stickyCandidate } from '../leader/candidates.js';
import { waitTimeoutOf } from '../options/call-input.js';

/**
 * A sticky `@Exclusive` call's lease: the term of this instance's owner candidate for the key (started by the first
 * call, which waits for its first attempt), kept across calls — `exit` leaves it held. One call at a time uses the
 * term: a call that overlaps a running one is busy, or waits in this process's line when it has a `priority` or a
 * `waitTimeoutMs` (`LeaseWaitTimeoutError` at its end); a call nested in a call of the key borrows its lease. Not the
 * owner: busy. Busy is a `LeaseBusyError` (a `busy` event), which `onBusy: 'skip'` turns into a skipped call.
 */
export async function stickyEntry(
  engine: ServiceEngine,
  targetKey: string,
  metadata: ExclusiveMetadata,
  keyTemplate: string,
  signal?: AbortSignal,
): Promise<LeaseEntry> {
  signal?.throwIfAborted();
  const borrowed = engine.borrow(targetKey);
  if (borrowed) return { lease: borrowed, exit: () => Promise.resolve() };
  const owner = stickyCandidate(engine, targetKey, { priority: metadata.priority, keyTemplate });
  if (!owner) throw new LeaseShutdownError(targetKey);
  await owner.firstAttempt;
  const busy = () => {
    engine.emit({ type: 'busy', targetKey, keyTemplate, at: new Date() });
    return new LeaseBusyError(targetKey, engine.options.heartbeatIntervalMs);
  };
  if (!owner.lease) throw busy();
  if (!owner.turns.tryTake()) {
    if (metadata.priority === undefined && metadata.waitTimeoutMs === undefined) throw busy();
    const waitTimeoutMs = waitTimeoutOf(metadata, engine.options.defaultWaitTimeoutMs);
    await owner.turns.take(targetKey, metadata.priority ?? 0, waitTimeoutMs, signal);
  }
  // The term may have ended while the call waited for its turn.
  const lease = owner.lease;
  if (!lease) {
    owner.turns.give();
    throw busy();
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
