import { LeaseArgumentError, LeaseConfigError } from '../errors/lease.errors.js';
import type { ExclusiveOptions } from '../interfaces/exclusive-options.interface.js';
import {
  acquireCall,
  checkElectionKeys,
  exclusiveDeclaration,
  preemptGraceOf,
  runCall,
  stickyDeclaration,
  tryAcquireRequest,
  waitBoundMs,
} from './busy-policy.js';

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

describe('the busy policy of a call: one place translates it for the engine', () => {
  it('defaults: run and @Exclusive refuse a busy key, acquire waits; the module default bounds the wait', () => {
    expect(runCall('k', {}).busy).toEqual({ kind: 'throw' });
    expect(acquireCall('k', {}).busy).toEqual({ kind: 'wait' });
    expect(exclusiveDeclaration('k').busy).toEqual({ kind: 'throw' });
    expect(waitBoundMs({ kind: 'wait' }, { defaultWaitTimeoutMs: 60_000 })).toBe(60_000);
    expect(waitBoundMs({ kind: 'wait', timeoutMs: 0 }, { defaultWaitTimeoutMs: 60_000 })).toBe(0);
  });

  it('a string form is its object form with the defaults', () => {
    expect(runCall('k', { onBusy: 'wait' }).busy).toEqual({ kind: 'wait' });
    expect(runCall('k', { onBusy: { wait: {} } }).busy).toEqual({ kind: 'wait', timeoutMs: undefined });
    expect(runCall('k', { onBusy: { wait: { timeoutMs: 5 } } }).busy).toEqual({ kind: 'wait', timeoutMs: 5 });
    expect(runCall('k', { onBusy: { join: { timeoutMs: 7 } } }).busy).toEqual({ kind: 'join', timeoutMs: 7 });
    const preempt = acquireCall('k', { onBusy: { preempt: { graceMs: 0, waitTimeoutMs: 9 } } });
    expect(preempt.busy).toEqual({ kind: 'preempt', graceMs: 0, waitTimeoutMs: 9 });
    expect(preemptGraceOf(preempt.busy, { preemptGraceMs: 600 })).toBe(0);
    expect(preemptGraceOf({ kind: 'preempt' }, { preemptGraceMs: 600 })).toBe(600);
    expect(preemptGraceOf({ kind: 'wait' }, { preemptGraceMs: 600 })).toBeUndefined();
    expect(waitBoundMs(preempt.busy, { defaultWaitTimeoutMs: 60_000 })).toBe(9);
  });

  it('waiting is never inferred from a priority in the options form; the shorthand @Exclusive(key, n) waits', () => {
    expect(runCall('k', { priority: 5 }).busy).toEqual({ kind: 'throw' });
    expect(runCall('k', { priority: 5 }).request.priority).toBe(5);
    expect(exclusiveDeclaration('k', { priority: 5 }).busy).toEqual({ kind: 'throw' });
    expect(exclusiveDeclaration('k', 5)).toMatchObject({ priority: 5, busy: { kind: 'wait' } });
    expect(exclusiveDeclaration('k', 5)).toEqual(exclusiveDeclaration('k', { priority: 5, onBusy: 'wait' }));
  });

  it('the request carries the key, rank, hold, template and limit; the signal rides along', () => {
    const signal = new AbortController().signal;
    expect(runCall('k', { priority: 2, holdAtLeastMs: 10, keyTemplate: 't', limit: 3, signal })).toEqual({
      request: { targetKey: 'k', priority: 2, holdMs: 10, keyTemplate: 't', limit: 3 },
      busy: { kind: 'throw' },
      signal,
    });
    expect(tryAcquireRequest('k', {})).toEqual({
      targetKey: 'k',
      priority: 0,
      holdMs: 0,
      keyTemplate: '(none)',
      limit: 1,
    });
  });
});

describe('what each door refuses at run time (JavaScript callers, casts)', () => {
  it.each<[string, () => unknown, RegExp]>([
    ['a semaphore joining', () => runCall('k', loose({ limit: 4, onBusy: 'join' })), /limit above 1 .*onBusy 'join'/],
    [
      'a semaphore preempting',
      () => acquireCall('k', loose({ limit: 4, onBusy: { preempt: {} } })),
      /limit above 1 .*onBusy 'preempt'/,
    ],
    ['tryAcquire waiting', () => tryAcquireRequest('k', loose({ onBusy: 'wait' })), /attempts once and never waits/],
    ['acquire throwing', () => acquireCall('k', loose({ onBusy: 'throw' })), /onBusy must be one of 'wait'/],
    ['run skipping', () => runCall('k', loose({ onBusy: 'skip' })), /run\(\): onBusy must be one of 'throw'/],
    ['two policies at once', () => runCall('k', loose({ onBusy: { wait: {}, join: {} } })), /got \{"wait":\{\},"join"/],
    ['an unknown policy', () => runCall('k', loose({ onBusy: 'retry' })), /got "retry"/],
    ['a policy that is no object', () => runCall('k', loose({ onBusy: { wait: 5 } })), /takes an object/],
    [
      'a typo in a policy',
      () => runCall('k', loose({ onBusy: { wait: { timeout: 5 } } })),
      /has no field "timeout": did you mean "timeoutMs"\?/,
    ],
    [
      'a negative bound',
      () => runCall('k', loose({ onBusy: { join: { timeoutMs: -1 } } })),
      /onBusy\.join\.timeoutMs must be a non-negative integer/,
    ],
    [
      'a typo in an option',
      () => runCall('k', loose({ prority: 1 })),
      /run\(\): unknown option "prority": did you mean "priority"\?/,
    ],
    ['an option far from all', () => runCall('k', loose({ colour: 1 })), /the options are priority, holdAtLeastMs/],
    ['an inherited name as a policy', () => runCall('k', loose({ onBusy: { toString: {} } })), /onBusy must be one of/],
    [
      'an inherited name as an option',
      () => runCall('k', loose({ toString: 1 })),
      /unknown option "toString": the options are priority/,
    ],
  ])('%s: a LeaseArgumentError with advice', (_, check, message) => {
    const error = thrown(check);
    expect(error).toBeInstanceOf(LeaseArgumentError);
    expect((error as Error).message).toMatch(message);
  });

  it.each<[string, string]>([
    ['waitTimeoutMs', 'onBusy: { wait: { timeoutMs } }'],
    ['preempt', "onBusy: 'preempt'"],
    ['preemptGraceMs', 'onBusy: { preempt: { graceMs } }'],
    ['joinTimeoutMs', 'onBusy: { join: { timeoutMs } }'],
  ])('the removed option %s names its new spelling', (name, spelling) => {
    expect(thrown(() => runCall('k', loose({ [name]: 5 })))).toHaveProperty(
      'message',
      `run(): unknown option "${name}": did you mean ${spelling}?`,
    );
    expect(thrown(() => exclusiveDeclaration('k', loose({ [name]: 5 })))).toHaveProperty(
      'message',
      `@Exclusive: unknown option "${name}": did you mean ${spelling}?`,
    );
  });

  it('sticky on @Exclusive points at @Sticky; elect() takes only its own options', () => {
    expect(thrown(() => exclusiveDeclaration('k', loose({ sticky: true })))).toHaveProperty(
      'message',
      '@Exclusive: unknown option "sticky": did you mean @Sticky(key, options) instead of @Exclusive?',
    );
    expect(() => checkElectionKeys('elect()', { priority: 1, keyTemplate: 't' })).not.toThrow();
    expect(thrown(() => checkElectionKeys('elect()', loose({ onBusy: 'wait' })))).toBeInstanceOf(LeaseArgumentError);
  });
});

/**
 * One rule per value, whichever door it comes through: a value valid per call is valid at decoration, and a value
 * refused per call (LeaseArgumentError) is refused at decoration (LeaseConfigError), with the same message named
 * after the decorator.
 */
const TABLE: Array<[string, ExclusiveOptions, boolean]> = [
  ['priority 0', { priority: 0 }, true],
  ['priority -2^31', { priority: -2_147_483_648 }, true],
  ['priority 2^31 - 1', { priority: 2_147_483_647 }, true],
  ['priority 2^31', { priority: 2_147_483_648 }, false],
  ['priority 1.5', { priority: 1.5 }, false],
  ['priority NaN', { priority: Number.NaN }, false],
  ['priority "3"', loose({ priority: '3' }), false],
  ['holdAtLeastMs 0', { holdAtLeastMs: 0 }, true],
  ['holdAtLeastMs 2^31', { holdAtLeastMs: 2_147_483_648 }, false],
  ['holdAtLeastMs -1', { holdAtLeastMs: -1 }, false],
  ['holdAtLeastMs "10"', loose({ holdAtLeastMs: '10' }), false],
  ['limit 1000', { limit: 1_000 }, true],
  ['limit 0', { limit: 0 }, false],
  ['a wait of 0', { onBusy: { wait: { timeoutMs: 0 } } }, true],
  ['a wait of 2^31 - 1', { onBusy: { wait: { timeoutMs: 2_147_483_647 } } }, true],
  ['a wait of 2^31', { onBusy: { wait: { timeoutMs: 2_147_483_648 } } }, false],
  ['a wait of Infinity', { onBusy: { wait: { timeoutMs: Infinity } } }, false],
  ['a join of 0.5', { onBusy: { join: { timeoutMs: 0.5 } } }, false],
  ['a grace of 0', { onBusy: { preempt: { graceMs: 0 } } }, true],
  ['a grace of -1', { onBusy: { preempt: { graceMs: -1 } } }, false],
  ['a grace of "100"', loose({ onBusy: { preempt: { graceMs: '100' } } }), false],
  ['a preemption wait of -1', { onBusy: { preempt: { waitTimeoutMs: -1 } } }, false],
  ['a semaphore waiting', { limit: 3, onBusy: 'wait' }, true],
  ['a semaphore joining', loose({ limit: 3, onBusy: 'join' }), false],
  ['a single holder joining', { limit: 1, onBusy: 'join' }, true],
];

describe('the same rules at decoration and per call', () => {
  it.each(TABLE)('%s: the same answer through both doors', (_, options, valid) => {
    const { onBusy, ...rest } = options;
    // `skip` is a decorator's only; the others go through run() as they are.
    const perCall = thrown(() => runCall('k', loose(onBusy === undefined ? rest : options)));
    const declared = thrown(() => exclusiveDeclaration('k', options));
    if (valid) {
      expect([perCall, declared]).toEqual([undefined, undefined]);
      return;
    }
    expect(perCall).toBeInstanceOf(LeaseArgumentError);
    expect(declared).toBeInstanceOf(LeaseConfigError);
    expect((declared as Error).message).toBe(`@Exclusive ${(perCall as Error).message}`);
  });

  it('a priority given as the second argument follows the same rule', () => {
    expect(() => exclusiveDeclaration('k', 2_147_483_648)).toThrow(LeaseConfigError);
  });

  it('the messages are the per-call ones, byte for byte', () => {
    expect(thrown(() => runCall('k', { priority: 1.5 }))).toHaveProperty(
      'message',
      'priority must be an integer between -2147483648 and 2147483647, got 1.5',
    );
    expect(thrown(() => runCall('k', loose({ holdAtLeastMs: '10' })))).toHaveProperty(
      'message',
      'holdAtLeastMs must be a non-negative integer number of milliseconds (at most 2147483647), got "10"',
    );
  });
});

describe('@Sticky', () => {
  it('a fixed key; throw, skip or wait; no hold, no limit', () => {
    expect(stickyDeclaration('digest')).toEqual({
      targetKey: 'digest',
      priority: 0,
      holdMs: 0,
      limit: 1,
      busy: { kind: 'throw' },
      sticky: true,
    });
    expect(stickyDeclaration('digest', { priority: 2, onBusy: { wait: { timeoutMs: 9 } } })).toMatchObject({
      priority: 2,
      busy: { kind: 'wait', timeoutMs: 9 },
    });
  });

  it.each<[string, () => unknown, RegExp]>([
    ['a template with placeholders', () => stickyDeclaration('report:{id}'), /fixed key/],
    ['a key function', () => stickyDeclaration(() => 'digest'), /fixed key/],
    ['an empty key', () => stickyDeclaration(''), /fixed key/],
    ['a join', () => stickyDeclaration('digest', loose({ onBusy: 'join' })), /@Sticky: onBusy must be one of/],
    ['a preemption', () => stickyDeclaration('digest', loose({ onBusy: 'preempt' })), /one of 'throw', 'skip'/],
    ['holdAtLeastMs', () => stickyDeclaration('digest', loose({ holdAtLeastMs: 5 })), /keeps its one lease/],
    ['a limit', () => stickyDeclaration('digest', loose({ limit: 2 })), /keeps its one lease/],
  ])('%s is a LeaseConfigError', (_, check, message) => {
    const error = thrown(check);
    expect(error).toBeInstanceOf(LeaseConfigError);
    expect((error as Error).message).toMatch(message);
  });
});

describe('read-write modes (docs/read-write.md)', () => {
  it('a mode is a read-write request: a reader asks limit 0, a writer -1; throw or wait, at every door', () => {
    expect(tryAcquireRequest('k', { mode: 'shared' }).limit).toBe(0);
    expect(acquireCall('k', { mode: 'exclusive' }).request.limit).toBe(-1);
    expect(runCall('k', { mode: 'shared', onBusy: 'wait', priority: 2 }).request).toMatchObject({
      limit: 0,
      priority: 2,
    });
    const declared = exclusiveDeclaration('report:{id}', { mode: 'exclusive', onBusy: 'skip' });
    expect([declared.limit, declared.busy]).toEqual([-1, { kind: 'skip' }]);
  });

  it('refuses what a read-write key has no room for: join, preempt, a limit, a hold, an unknown mode', () => {
    for (const options of [
      { mode: 'shared', onBusy: 'join' },
      { mode: 'exclusive', onBusy: { preempt: {} } },
      { mode: 'shared', limit: 2 },
      { mode: 'exclusive', limit: 1 },
      { mode: 'shared', holdAtLeastMs: 0 },
      { mode: 'read' },
    ]) {
      const perCall = thrown(() => runCall('k', loose(options)));
      expect(perCall).toBeInstanceOf(LeaseArgumentError);
      const declared = thrown(() => exclusiveDeclaration('k', loose(options)));
      expect(declared).toBeInstanceOf(LeaseConfigError);
      expect((declared as Error).message).toContain((perCall as Error).message);
    }
    expect((thrown(() => runCall('k', loose({ mode: 'shared', onBusy: 'join' }))) as Error).message).toMatch(
      /^mode \(a read-write lease\) cannot be combined with onBusy 'join'/,
    );
    expect(thrown(() => stickyDeclaration('s', loose({ mode: 'shared' })))).toBeInstanceOf(LeaseConfigError);
  });
});
