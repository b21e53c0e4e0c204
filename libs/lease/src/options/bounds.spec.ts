import { resolveLeaseOptions } from './resolve-lease-options.js';
import {
  acquireBoundMs,
  BATCH_LOCK_WAIT_MS,
  closeStepMs,
  connectBoundMs,
  connectionCloseMs,
  shortBoundMs,
  slackMs,
  statementPoolBoundMs,
} from './bounds.js';

/** Every bound derived from the options, as docs/bounds.md table says. */
describe('bounds', () => {
  const defaults = resolveLeaseOptions();
  const fast = resolveLeaseOptions({ timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000 } });

  it.each<[string, (o: typeof defaults) => number, number, number]>([
    ['an acquisition: leaseTimeoutMs − safetyMarginMs', acquireBoundMs, 90_000, 900],
    ['a release, a dequeue, a read: one interval, at least min(1 s, acquisition)', shortBoundMs, 30_000, 900],
    ['the statement pool’s session: an acquisition’s', statementPoolBoundMs, 90_000, 900],
    ['getting a connection: max(interval, min(acquisition, 10 s))', connectBoundMs, 30_000, 900],
    ['the client’s slack: half an interval, at most 1 s', slackMs, 1_000, 50],
    ['each step of close(): a release’s bound and the slack', closeStepMs, 31_000, 950],
    ['closing one connection: min(1 s, interval)', connectionCloseMs, 1_000, 100],
  ])('%s', (_, bound, withDefaults, withFast) => {
    expect(bound(defaults)).toBe(withDefaults);
    expect(bound(fast)).toBe(withFast);
  });

  it('a release has room for a loaded server, within an acquisition’s bound (its session’s: never framed)', () => {
    const pooler = resolveLeaseOptions({ timing: { heartbeatIntervalMs: 300, leaseTimeoutMs: 3_000 } });
    expect(shortBoundMs(pooler)).toBe(1_000);
    const tight = resolveLeaseOptions({ timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 300 } });
    expect(shortBoundMs(tight)).toBe(acquireBoundMs(tight));
    for (const options of [defaults, fast, pooler, tight]) {
      expect(shortBoundMs(options)).toBeGreaterThanOrEqual(options.heartbeatIntervalMs);
      expect(shortBoundMs(options)).toBeLessThanOrEqual(statementPoolBoundMs(options));
      expect(closeStepMs(options)).toBeGreaterThan(shortBoundMs(options));
    }
  });

  it('a batch waits 10 ms for a lock, then its callers go alone', () => {
    expect(BATCH_LOCK_WAIT_MS).toBe(10);
  });

  it('the server always ends an acquisition before its client gives up', () => {
    for (const options of [defaults, fast]) {
      expect(statementPoolBoundMs(options)).toBeGreaterThanOrEqual(acquireBoundMs(options));
      expect(slackMs(options)).toBeGreaterThan(0);
    }
  });
});
