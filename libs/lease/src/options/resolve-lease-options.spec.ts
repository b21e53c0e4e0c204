import { LeaseConfigError } from '../errors/lease.errors.js';
import { resolveLeaseNames } from './lease-names.js';
import type { LeaseModuleOptions } from '../interfaces/lease-module-options.interface.js';
import { resolveLeaseOptions } from './resolve-lease-options.js';

/** Option resolution: the defaults, and every rule with the advice of its message. */
describe('resolveLeaseOptions', () => {
  it('applies the documented defaults', () => {
    const options = resolveLeaseOptions();
    expect(options).toMatchObject({
      heartbeatIntervalMs: 30_000,
      leaseTimeoutMs: 120_000,
      safetyMarginMs: 30_000,
      waiterTimeoutMs: 15_000,
      waiterHeartbeatIntervalMs: 5_000,
      defaultWaitTimeoutMs: 60_000,
      waitPollIntervalMs: 30_000,
      notify: true,
      maxWaitersPerTarget: 1_000,
      maxWaitersPerProcess: 10_000,
      agingIntervalMs: null,
      schema: 'public',
      tableName: 'job_lease',
      waiterTableName: 'job_lease_waiter',
      createSchema: false,
      fencedIdleTimeoutMs: 120_000,
      asyncReleaseCommits: false,
      pooler: 'none',
      sessionUrl: null,
      shutdownGraceMs: 25_000,
      preemptGraceMs: 60_000,
    });
    expect(options.owner).toMatch(/^.+:\d+:[0-9a-f]{8}$/);
  });

  it('preemptGraceMs: two heartbeat intervals by default; 0 and decimal strings accepted; negatives refused', () => {
    expect(resolveLeaseOptions({ heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000 }).preemptGraceMs).toBe(200);
    expect(resolveLeaseOptions({ preemptGraceMs: 0 }).preemptGraceMs).toBe(0);
    expect(resolveLeaseOptions({ preemptGraceMs: '750' as never }).preemptGraceMs).toBe(750);
    expect(() => resolveLeaseOptions({ preemptGraceMs: -1 })).toThrow(LeaseConfigError);
    expect(() => resolveLeaseOptions({ preemptGraceMs: 1.5 })).toThrow(/preemptGraceMs/);
  });

  it('shutdownGraceMs: 0 (close at once, as before the drain) and decimal strings are accepted', () => {
    expect(resolveLeaseOptions({ shutdownGraceMs: 0 }).shutdownGraceMs).toBe(0);
    expect(resolveLeaseOptions({ shutdownGraceMs: '5000' as never }).shutdownGraceMs).toBe(5_000);
  });

  it('behind a transaction pooler without sessionUrl: notify off, polling at most every second', () => {
    const options = resolveLeaseOptions({ pooler: 'transaction' });
    expect([options.notify, options.waitPollIntervalMs]).toEqual([false, 1_000]);
    const direct = resolveLeaseOptions({ pooler: 'transaction', sessionUrl: 'postgres://db/x' });
    expect([direct.notify, direct.waitPollIntervalMs]).toEqual([true, 30_000]);
  });

  const fast = { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000 };
  it.each<[string, LeaseModuleOptions, RegExp]>([
    ['options not an object', null as never, /must be an object/],
    ['a zero interval', { heartbeatIntervalMs: 0 }, /heartbeatIntervalMs must be a positive integer/],
    ['a fractional timeout', { leaseTimeoutMs: 1.5 }, /leaseTimeoutMs must be a positive integer/],
    [
      'a timeout under 3 intervals',
      { heartbeatIntervalMs: 500, leaseTimeoutMs: 1_000 },
      /at least 3 × heartbeatIntervalMs .*raise the timeout or shorten the interval/,
    ],
    ['a margin leaving under 2 intervals', { ...fast, safetyMarginMs: 900 }, /lower the margin to at most 800/],
    [
      'asyncReleaseCommits not a boolean',
      { asyncReleaseCommits: 'yes' as never },
      /asyncReleaseCommits must be a boolean/,
    ],
    ['a waiter timeout under 30 ms', { waiterTimeoutMs: 29 }, /waiterTimeoutMs \(29\) must be at least 30 ms/],
    ['an empty table name', { tableName: '' }, /tableName must be a non-empty string/],
    ['a NUL in the schema', { schema: 'a\0b' }, /schema must not contain NUL/],
    [
      'a table name too long for its derived names',
      { tableName: 't'.repeat(52) },
      /at most 51 fit.*choose a shorter name/,
    ],
    ['equal table names', { tableName: 'x', waiterTableName: 'x' }, /must differ/],
    ['a table named like a derived object', { tableName: 'jl', waiterTableName: 'jl_fencing_seq' }, /collides with/],
    ['an empty owner', { owner: '' }, /owner must be a non-empty string/],
    ['a NUL in the owner', { owner: 'a\0' }, /owner must not contain NUL/],
    ['a lone surrogate in the owner', { owner: '\uD800' }, /well-formed UTF-16/],
    ['notify not a boolean', { notify: 1 as never }, /notify must be a boolean/],
    ['traceTargetKeys not a boolean', { traceTargetKeys: 'yes' as never }, /traceTargetKeys must be a boolean/],
    ['an unknown pooler', { pooler: 'session' as never }, /pooler must be 'none' or 'transaction'/],
    ['an empty sessionUrl', { sessionUrl: '' }, /sessionUrl must be a non-empty connection string/],
    [
      'notify behind a blind pooler',
      { pooler: 'transaction', notify: true },
      /give sessionUrl .* or leave notify unset/,
    ],
    [
      'a fenced idle timeout past its bound',
      { ...fast, fencedIdleTimeoutMs: 1_701 },
      /fencedIdleTimeoutMs \(1701\) must be at most .* \(1700\)/,
    ],
    ['a zero aging interval', { agingIntervalMs: 0 }, /agingIntervalMs must be a positive integer/],
    ['a negative shutdown grace', { shutdownGraceMs: -1 }, /shutdownGraceMs must be an integer from 0 to 2147483647/],
    ['a fractional shutdown grace', { shutdownGraceMs: 0.5 }, /shutdownGraceMs must be an integer from 0/],
    ['a shutdown grace past the timer range', { shutdownGraceMs: 2 ** 31 }, /at most|from 0 to 2147483647/],
    ['a shutdown grace that is no number', { shutdownGraceMs: 'soon' as never }, /got the string "soon"/],
  ])('%s → LeaseConfigError with advice', (_, options, message) => {
    expect(() => resolveLeaseOptions(options)).toThrow(LeaseConfigError);
    expect(() => resolveLeaseOptions(options)).toThrow(message);
  });
});

describe('resolveLeaseNames', () => {
  it('validates the names alone: no owner identity is made, timing options are not read', () => {
    expect(resolveLeaseNames({ schema: 'jobs', tableName: 'lease' })).toEqual({
      schema: 'jobs',
      tableName: 'lease',
      waiterTableName: 'job_lease_waiter',
    });
    expect(Object.keys(resolveLeaseNames())).toEqual(['schema', 'tableName', 'waiterTableName']);
    expect(() => resolveLeaseNames({ tableName: 'a'.repeat(64) })).toThrow(/bytes/);
  });

  describe('what a typo or ConfigService hands over (issue 28)', () => {
    it('an unknown key is a LeaseConfigError naming the nearest valid key', () => {
      const typo = { heartbeatIntervallMs: 1_000 } as LeaseModuleOptions;
      expect(() => resolveLeaseOptions(typo)).toThrow(LeaseConfigError);
      expect(() => resolveLeaseOptions(typo)).toThrow(
        'Unknown LeaseModule option "heartbeatIntervallMs": did you mean "heartbeatIntervalMs"?',
      );
      expect(() => resolveLeaseOptions({ leaseTimoutMs: 1 } as LeaseModuleOptions)).toThrow(
        /did you mean "leaseTimeoutMs"/,
      );
    });

    it('an unknown key far from every valid one lists the valid keys', () => {
      expect(() => resolveLeaseOptions({ colour: 'red' } as LeaseModuleOptions)).toThrow(
        /Unknown LeaseModule option "colour": the options are heartbeatIntervalMs, leaseTimeoutMs, .*sessionUrl/,
      );
    });

    it('numeric strings (ConfigService, environment variables) are accepted as numbers', () => {
      const options = resolveLeaseOptions({
        heartbeatIntervalMs: '1000',
        leaseTimeoutMs: ' 5000 ',
        poolSize: '4',
      } as unknown as LeaseModuleOptions);
      expect([options.heartbeatIntervalMs, options.leaseTimeoutMs, options.poolSize]).toEqual([1_000, 5_000, 4]);
    });

    it('a string that is not a number is named as a string', () => {
      expect(() => resolveLeaseOptions({ heartbeatIntervalMs: '10s' } as unknown as LeaseModuleOptions)).toThrow(
        'heartbeatIntervalMs must be a positive integer (at most 2147483647), got the string "10s"',
      );
    });
  });
});
