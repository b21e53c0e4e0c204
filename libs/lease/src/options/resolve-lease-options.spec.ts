import { LeaseConfigError } from '../errors/lease.errors.js';
import { resolveLeaseNames } from './lease-names.js';
import type { LeaseModuleOptions } from '../interfaces/lease-module-options.interface.js';
import { resolveLeaseOptions } from './resolve-lease-options.js';
import { groupedOptions, mergeLeaseOptions } from './option-groups.js';

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
    expect(resolveLeaseOptions({ timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000 } }).preemptGraceMs).toBe(
      200,
    );
    expect(resolveLeaseOptions({ timing: { preemptGraceMs: 0 } }).preemptGraceMs).toBe(0);
    expect(resolveLeaseOptions({ timing: { preemptGraceMs: '750' as never } }).preemptGraceMs).toBe(750);
    expect(() => resolveLeaseOptions({ timing: { preemptGraceMs: -1 } })).toThrow(LeaseConfigError);
    expect(() => resolveLeaseOptions({ timing: { preemptGraceMs: 1.5 } })).toThrow(/preemptGraceMs/);
  });

  it('shutdownGraceMs: 0 (close at once, as before the drain) and decimal strings are accepted', () => {
    expect(resolveLeaseOptions({ timing: { shutdownGraceMs: 0 } }).shutdownGraceMs).toBe(0);
    expect(resolveLeaseOptions({ timing: { shutdownGraceMs: '5000' as never } }).shutdownGraceMs).toBe(5_000);
  });

  it('behind a transaction pooler without sessionUrl: notify off, polling at most every second', () => {
    const options = resolveLeaseOptions({ connections: { pooler: 'transaction' } });
    expect([options.notify, options.waitPollIntervalMs]).toEqual([false, 1_000]);
    const direct = resolveLeaseOptions({ connections: { pooler: 'transaction', sessionUrl: 'postgres://db/x' } });
    expect([direct.notify, direct.waitPollIntervalMs]).toEqual([true, 30_000]);
  });

  const fast = { timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000 } };
  it.each<[string, LeaseModuleOptions, RegExp]>([
    ['options not an object', null as never, /must be an object/],
    ['a zero interval', { timing: { heartbeatIntervalMs: 0 } }, /heartbeatIntervalMs must be a positive integer/],
    ['a fractional timeout', { timing: { leaseTimeoutMs: 1.5 } }, /leaseTimeoutMs must be a positive integer/],
    [
      'a timeout under 3 intervals',
      { timing: { heartbeatIntervalMs: 500, leaseTimeoutMs: 1_000 } },
      /at least 3 × heartbeatIntervalMs .*raise the timeout or shorten the interval/,
    ],
    [
      'a margin leaving under 2 intervals',
      mergeLeaseOptions(fast, { timing: { safetyMarginMs: 900 } }),
      /lower the margin to at most 800/,
    ],
    [
      'asyncReleaseCommits not a boolean',
      { connections: { asyncReleaseCommits: 'yes' as never } },
      /asyncReleaseCommits must be a boolean/,
    ],
    [
      'a waiter timeout under 30 ms',
      { timing: { waiterTimeoutMs: 29 } },
      /waiterTimeoutMs \(29\) must be at least 30 ms/,
    ],
    ['an empty table name', { tables: { tableName: '' } }, /tableName must be a non-empty string/],
    ['a NUL in the schema', { tables: { schema: 'a\0b' } }, /schema must not contain NUL/],
    [
      'a table name too long for its derived names',
      { tables: { tableName: 't'.repeat(52) } },
      /at most 51 fit.*choose a shorter name/,
    ],
    ['equal table names', { tables: { tableName: 'x', waiterTableName: 'x' } }, /must differ/],
    [
      'a table named like a derived object',
      { tables: { tableName: 'jl', waiterTableName: 'jl_fencing_seq' } },
      /collides with/,
    ],
    ['an empty owner', { owner: '' }, /owner must be a non-empty string/],
    ['a NUL in the owner', { owner: 'a\0' }, /owner must not contain NUL/],
    ['a lone surrogate in the owner', { owner: '\uD800' }, /well-formed UTF-16/],
    ['notify not a boolean', { connections: { notify: 1 as never } }, /notify must be a boolean/],
    [
      'traceTargetKeys not a boolean',
      { observability: { traceTargetKeys: 'yes' as never } },
      /traceTargetKeys must be a boolean/,
    ],
    ['an unknown pooler', { connections: { pooler: 'session' as never } }, /pooler must be 'none' or 'transaction'/],
    ['an empty sessionUrl', { connections: { sessionUrl: '' } }, /sessionUrl must be a non-empty connection string/],
    [
      'notify behind a blind pooler',
      { connections: { pooler: 'transaction', notify: true } },
      /give sessionUrl .* or leave notify unset/,
    ],
    [
      'a fenced idle timeout past its bound',
      mergeLeaseOptions(fast, { timing: { fencedIdleTimeoutMs: 1_701 } }),
      /fencedIdleTimeoutMs \(1701\) must be at most .* \(1700\)/,
    ],
    ['a zero aging interval', { timing: { agingIntervalMs: 0 } }, /agingIntervalMs must be a positive integer/],
    [
      'a negative shutdown grace',
      { timing: { shutdownGraceMs: -1 } },
      /shutdownGraceMs must be an integer from 0 to 2147483647/,
    ],
    ['a fractional shutdown grace', { timing: { shutdownGraceMs: 0.5 } }, /shutdownGraceMs must be an integer from 0/],
    ['a shutdown grace past the timer range', { timing: { shutdownGraceMs: 2 ** 31 } }, /at most|from 0 to 2147483647/],
    ['a shutdown grace that is no number', { timing: { shutdownGraceMs: 'soon' as never } }, /got the string "soon"/],
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
    it('an unknown key is a LeaseConfigError naming the nearest valid path', () => {
      const typo = { timing: { heartbeatIntervallMs: 1_000 } } as LeaseModuleOptions;
      expect(() => resolveLeaseOptions(typo)).toThrow(LeaseConfigError);
      expect(() => resolveLeaseOptions(typo)).toThrow(
        'Unknown LeaseModule option "timing.heartbeatIntervallMs": did you mean "timing.heartbeatIntervalMs"?',
      );
      expect(() => resolveLeaseOptions({ timing: { leaseTimoutMs: 1 } } as LeaseModuleOptions)).toThrow(
        /did you mean "timing.leaseTimeoutMs"/,
      );
    });

    it('a flat name of the old shape names its group; a field in the wrong group names the right one', () => {
      expect(() => resolveLeaseOptions({ heartbeatIntervalMs: 1_000 } as LeaseModuleOptions)).toThrow(
        'Unknown LeaseModule option "heartbeatIntervalMs": did you mean "timing.heartbeatIntervalMs"?',
      );
      expect(() => resolveLeaseOptions({ createSchema: true } as LeaseModuleOptions)).toThrow(
        /did you mean "tables.createSchema"/,
      );
      expect(() => resolveLeaseOptions({ heartbeatIntervallMs: 1 } as LeaseModuleOptions)).toThrow(
        /did you mean "timing.heartbeatIntervalMs"/,
      );
      expect(() => resolveLeaseOptions({ timing: { poolSize: 4 } } as LeaseModuleOptions)).toThrow(
        /"timing.poolSize": did you mean "connections.poolSize"/,
      );
      expect(() => resolveLeaseOptions({ timings: {} } as LeaseModuleOptions)).toThrow(/did you mean "timing"/);
    });

    it('an unknown key far from every valid one lists the valid keys; a group must be an object', () => {
      expect(() => resolveLeaseOptions({ colour: 'red' } as LeaseModuleOptions)).toThrow(
        'Unknown LeaseModule option "colour": the options are timing, connections, tables, limits, observability, owner',
      );
      expect(() => resolveLeaseOptions({ limits: { colour: 'red' } } as LeaseModuleOptions)).toThrow(
        /the options are limits.maxWaitersPerTarget, limits.maxWaitersPerProcess/,
      );
      expect(() => resolveLeaseOptions({ timing: 5 } as unknown as LeaseModuleOptions)).toThrow(
        'LeaseModule option timing must be an object (a group of options), got number',
      );
      expect(resolveLeaseOptions({ timing: undefined, owner: 'me' }).owner).toBe('me');
    });

    it('numeric strings (ConfigService, environment variables) are accepted as numbers', () => {
      const options = resolveLeaseOptions({
        timing: { heartbeatIntervalMs: '1000', leaseTimeoutMs: ' 5000 ' },
        connections: { poolSize: '4' },
      } as unknown as LeaseModuleOptions);
      expect([options.heartbeatIntervalMs, options.leaseTimeoutMs, options.poolSize]).toEqual([1_000, 5_000, 4]);
    });

    it('a string that is not a number is named as a string', () => {
      expect(() =>
        resolveLeaseOptions({ timing: { heartbeatIntervalMs: '10s' } } as unknown as LeaseModuleOptions),
      ).toThrow('heartbeatIntervalMs must be a positive integer (at most 2147483647), got the string "10s"');
    });
  });
});

describe('the grouped view and the merge of options', () => {
  it('LeaseService.options: every group and field, resolved, frozen', () => {
    const view = groupedOptions(resolveLeaseOptions({ owner: 'me', connections: { dataSourceName: 'leases' } }));
    expect(Object.keys(view)).toEqual(['timing', 'connections', 'tables', 'limits', 'observability', 'owner']);
    expect(view.timing).toEqual({
      heartbeatIntervalMs: 30_000,
      leaseTimeoutMs: 120_000,
      safetyMarginMs: 30_000,
      waiterTimeoutMs: 15_000,
      defaultWaitTimeoutMs: 60_000,
      waitPollIntervalMs: 30_000,
      preemptGraceMs: 60_000,
      joinResultTtlMs: 60_000,
      shutdownGraceMs: 25_000,
      fencedIdleTimeoutMs: 120_000,
      agingIntervalMs: null,
    });
    expect(view.connections).toEqual({
      dataSourceName: 'leases',
      dataSource: null,
      poolSize: 10,
      maxBatchSize: 64,
      pooler: 'none',
      sessionUrl: null,
      notify: true,
      asyncReleaseCommits: false,
    });
    expect(view.tables).toEqual({
      schema: 'public',
      tableName: 'job_lease',
      waiterTableName: 'job_lease_waiter',
      createSchema: false,
    });
    expect(view.limits).toEqual({ maxWaitersPerTarget: 1_000, maxWaitersPerProcess: 10_000 });
    expect(view.observability).toEqual({ traceTargetKeys: false, journal: false });
    expect(view.owner).toBe('me');
    expect(Object.isFrozen(view) && Object.isFrozen(view.timing)).toBe(true);
  });

  it('merges group by group, later layers winning field by field', () => {
    const base: LeaseModuleOptions = { timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000 }, owner: 'a' };
    expect(mergeLeaseOptions(base, { timing: { leaseTimeoutMs: 3_000 }, tables: { createSchema: true } })).toEqual({
      timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 3_000 },
      owner: 'a',
      tables: { createSchema: true },
    });
    expect(base.timing).toEqual({ heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000 });
    expect(mergeLeaseOptions(undefined, { owner: 'b' }, {})).toEqual({ owner: 'b' });
  });
});
