import type { LeaseEntry, ServiceEngine } from '../engine/service-engine.js';
import { LeaseBusyError, LeaseShutdownError } from '../errors/lease.errors.js';
import type { ExclusiveMetadata } from '../interfaces/exclusive-options.interface.js';
import { stickyCandidate } from '../leader/candidates.js';

/**
 * A sticky `@Exclusive` call's lease: the term of this instance's owner candidate for the key (started by the first
 * call, which waits for its first attempt), kept across calls — `exit` leaves it held. Not the owner: a
 * `LeaseBusyError` (a `busy` event), which `onBusy: 'skip'` turns into a skipped call.
 */
export async function stickyEntry(
  engine: ServiceEngine,
  targetKey: string,
  metadata: ExclusiveMetadata,
  keyTemplate: string,
): Promise<LeaseEntry> {
  const owner = stickyCandidate(engine, targetKey, { priority: metadata.priority, keyTemplate });
  if (!owner) throw new LeaseShutdownError(targetKey);
  await owner.firstAttempt;
  const lease = owner.lease;
  if (!lease) {
    engine.emit({ type: 'busy', targetKey, keyTemplate, at: new Date() });
    throw new LeaseBusyError(targetKey, engine.options.heartbeatIntervalMs);
  }
  return { lease, exit: () => Promise.resolve() };
}
