/**
 * A call's own lease length (`leaseTimeoutMs` of `run`, `acquire`, `tryAcquire`, `@Exclusive`): its row carries it,
 * renewals keep it, others take the key over once it ran out since the last renewal, and the holder's local deadline
 * is it less the safety margin. Absent, the module's `timing.leaseTimeoutMs`.
 *
 * The heartbeat interval is the process's, one batched renewal for every lease: a call's lease is never renewed more
 * often than the others. So a call's value is held to the same rules the module's own `leaseTimeoutMs` is held to
 * (resolve-lease-options.ts), against the module's interval, margin and fenced idle timeout — a value the process's
 * heartbeat cannot keep is refused, never given a renewal schedule of its own. Above, only the `integer` column and
 * the timers bound it (2147483647 ms).
 */
import { LeaseArgumentError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { LeaseRequest } from './call-input.js';
import type { EngineSettings } from './engine-settings.js';

type Timing = Pick<EngineSettings, 'heartbeatIntervalMs' | 'safetyMarginMs' | 'fencedIdleTimeoutMs'>;

/** The module's rules, each as the least lease it allows (the order names the first that binds). */
function floors(o: Timing) {
  const interval = o.heartbeatIntervalMs;
  return [
    // A late heartbeat is not taken for a dead holder.
    { rule: 'heartbeat', floorMs: 3 * interval },
    // A lease acquired just after a tick is first renewed one interval later; a second interval leaves that renewal
    // (or its retry) time to be confirmed before the local deadline.
    { rule: 'margin', floorMs: o.safetyMarginMs + 2 * interval },
    // fencedIdleTimeoutMs ≤ 2 × leaseTimeoutMs − safetyMarginMs − 2 × interval, for the holder's lease and the
    // taker's: a taker blocked behind the holder's paused fenced transaction still gets a usable lease.
    { rule: 'fenced', floorMs: Math.ceil((o.fencedIdleTimeoutMs + o.safetyMarginMs + 2 * interval) / 2) },
  ] as const;
}

/** The shortest lease a call may ask under these options (never above the module's own `leaseTimeoutMs`). */
export function leaseTimeoutFloorMs(o: Timing): number {
  return Math.max(...floors(o).map(({ floorMs }) => floorMs));
}

/** The message of a call's lease length the module's timing cannot keep, or undefined. */
export function checkLeaseTimeout(leaseTimeoutMs: number, o: Timing): string | undefined {
  const floorMs = leaseTimeoutFloorMs(o);
  if (leaseTimeoutMs >= floorMs) return undefined;
  const { rule } = floors(o).find((floor) => floor.floorMs === floorMs)!;
  return messages.leaseTimeoutBelowFloor(leaseTimeoutMs, floorMs, rule, o);
}

/**
 * The lease length of a request: its own (checked against the module's timing: `LeaseArgumentError`), else the
 * module's. Where a call meets its engine (`LeaseService`'s methods, a decorated method's call), before anything is
 * written; the engine trusts it from there.
 */
export function leaseTimeoutOf(
  request: Pick<LeaseRequest, 'leaseTimeoutMs'> & { readonly targetKey?: string },
  o: Timing & Pick<EngineSettings, 'leaseTimeoutMs'>,
): number {
  if (request.leaseTimeoutMs === undefined) return o.leaseTimeoutMs;
  const message = checkLeaseTimeout(request.leaseTimeoutMs, o);
  if (message !== undefined) throw new LeaseArgumentError(message, request.targetKey);
  return request.leaseTimeoutMs;
}

/** A call whose lease length the module's timing keeps (see `leaseTimeoutOf`), unchanged. */
export function withinTiming<T extends { readonly request: LeaseRequest } | LeaseRequest>(
  call: T,
  o: EngineSettings,
): T {
  const given: { readonly request: LeaseRequest } | LeaseRequest = call;
  const request = 'request' in given ? given.request : given;
  // A call without its own length asks nothing of the settings (the module's own were checked when resolved).
  if (request.leaseTimeoutMs !== undefined) leaseTimeoutOf(request, o);
  return call;
}
