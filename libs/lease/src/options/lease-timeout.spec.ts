import { LeaseArgumentError, LeaseConfigError } from '../errors/lease.errors.js';
import type { StickyOptions } from '../interfaces/exclusive-options.interface.js';
import { acquireCall, exclusiveDeclaration, runCall, stickyDeclaration, tryAcquireRequest } from './busy-policy.js';
import { checkLeaseTimeout, leaseTimeoutFloorMs, leaseTimeoutOf } from './lease-timeout.js';
import { resolveLeaseOptions } from './resolve-lease-options.js';

const thrown = (check: () => unknown): unknown => {
  try {
    check();
    return undefined;
  } catch (error) {
    return error;
  }
};
/** What JavaScript (or a cast) may hand over: any value, unchecked by the compiler. */
const loose = (value: unknown) => value as never;

describe('leaseTimeoutMs per call', () => {
  // interval 100, margin 100 (the default: one interval), fenced idle 500.
  const settings = resolveLeaseOptions({
    timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 10_000, fencedIdleTimeoutMs: 500 },
  });

  it('every door takes it, and the request carries it (absent: the module’s)', () => {
    expect(runCall('k', { leaseTimeoutMs: 600 }).request.leaseTimeoutMs).toBe(600);
    expect(acquireCall('k', { leaseTimeoutMs: 600 }).request.leaseTimeoutMs).toBe(600);
    expect(tryAcquireRequest('k', { leaseTimeoutMs: 600 }).leaseTimeoutMs).toBe(600);
    expect(exclusiveDeclaration('k', { leaseTimeoutMs: 600 }).leaseTimeoutMs).toBe(600);
    expect(runCall('k', {}).request).not.toHaveProperty('leaseTimeoutMs');
    expect(leaseTimeoutOf(runCall('k', {}).request, settings)).toBe(10_000);
    expect(leaseTimeoutOf(runCall('k', { leaseTimeoutMs: 600 }).request, settings)).toBe(600);
  });

  it.each([0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2_147_483_648, '600', null])(
    '%p is not a lease length: LeaseArgumentError per call, LeaseConfigError at decoration',
    (value) => {
      const perCall = thrown(() => runCall('k', { leaseTimeoutMs: loose(value) }));
      expect(perCall).toBeInstanceOf(LeaseArgumentError);
      expect((perCall as Error).message).toMatch(/^leaseTimeoutMs must be a positive integer number of milliseconds/);
      expect(thrown(() => tryAcquireRequest('k', { leaseTimeoutMs: loose(value) }))).toBeInstanceOf(LeaseArgumentError);
      expect(thrown(() => acquireCall('k', { leaseTimeoutMs: loose(value) }))).toBeInstanceOf(LeaseArgumentError);
      const declared = thrown(() => exclusiveDeclaration('k', { leaseTimeoutMs: loose(value) }));
      expect(declared).toBeInstanceOf(LeaseConfigError);
      expect((declared as Error).message).toMatch(/^@Exclusive leaseTimeoutMs must be a positive integer/);
    },
  );

  it('the floor is the module’s own rules applied to the call: heartbeat, margin, fenced idle timeout', () => {
    // 3 × 100; 100 + 2 × 100; (500 + 100 + 200) / 2
    expect(leaseTimeoutFloorMs(settings)).toBe(400);
    expect(leaseTimeoutFloorMs({ ...settings, fencedIdleTimeoutMs: 100 })).toBe(300);
    expect(leaseTimeoutFloorMs({ ...settings, safetyMarginMs: 250, fencedIdleTimeoutMs: 100 })).toBe(450);
    // The module's own options always pass: the floor never exceeds its leaseTimeoutMs.
    for (const timing of [{}, { heartbeatIntervalMs: 100, leaseTimeoutMs: 300 }, { safetyMarginMs: 1 }]) {
      const module = resolveLeaseOptions({ timing });
      expect(leaseTimeoutFloorMs(module)).toBeLessThanOrEqual(module.leaseTimeoutMs);
      expect(checkLeaseTimeout(module.leaseTimeoutMs, module)).toBeUndefined();
    }
  });

  it('below the floor it names the rule that binds and what to change; the floor itself and above pass', () => {
    expect(checkLeaseTimeout(400, settings)).toBeUndefined();
    expect(checkLeaseTimeout(2_147_483_647, settings)).toBeUndefined();
    expect(checkLeaseTimeout(399, settings)).toBe(
      'leaseTimeoutMs (399) must be at least 400 under this module’s timing: (fencedIdleTimeoutMs 500 + ' +
        'safetyMarginMs 100 + 2 × heartbeatIntervalMs 100) / 2, so a takeover blocked behind a paused fenced ' +
        'transaction still gets a usable lease. Ask a longer lease, or lower timing.fencedIdleTimeoutMs',
    );
    const heartbeat = { ...settings, fencedIdleTimeoutMs: 100 };
    expect(checkLeaseTimeout(299, heartbeat)).toBe(
      'leaseTimeoutMs (299) must be at least 300 under this module’s timing: 3 × heartbeatIntervalMs 100, so ' +
        'a late heartbeat is not taken for a dead holder (the heartbeat interval is the process’s, for every ' +
        'lease). Ask a longer lease, or shorten timing.heartbeatIntervalMs',
    );
    const margin = { ...settings, safetyMarginMs: 250, fencedIdleTimeoutMs: 100 };
    expect(checkLeaseTimeout(449, margin)).toMatch(
      /^leaseTimeoutMs \(449\) must be at least 450 under this module’s timing: safetyMarginMs 250 \+ 2 × heartbeatIntervalMs 100, so a renewal/,
    );
    const error = thrown(() => leaseTimeoutOf(runCall('k', { leaseTimeoutMs: 399 }).request, settings));
    expect(error).toBeInstanceOf(LeaseArgumentError);
    expect((error as Error).message).toMatch(/^leaseTimeoutMs \(399\) must be at least 400/);
  });

  it('@Sticky does not take it (its term lease is the module’s): a LeaseConfigError naming its options', () => {
    const error = thrown(() => stickyDeclaration('k', { leaseTimeoutMs: 600 } as StickyOptions));
    expect(error).toBeInstanceOf(LeaseConfigError);
    expect((error as Error).message).toMatch(/leaseTimeoutMs/);
  });
});
