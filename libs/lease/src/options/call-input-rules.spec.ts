import { LeaseArgumentError, LeaseConfigError } from '../errors/lease.errors.js';
import {
  acquireOptionsOf,
  type CallInput,
  checkCall,
  checkDeclared,
  exclusiveMetadata,
  preemptGraceOf,
} from './call-input.js';

/**
 * One rule per call input, whichever door it comes through: a value valid per call is valid at decoration, and a
 * value refused per call (LeaseArgumentError) is refused at decoration (LeaseConfigError), with the same message.
 */
const TABLE: Array<[CallInput, unknown, boolean]> = [
  ['priority', 0, true],
  ['priority', -2_147_483_648, true],
  ['priority', 2_147_483_647, true],
  ['priority', 2_147_483_648, false],
  ['priority', -2_147_483_649, false],
  ['priority', 1.5, false],
  ['priority', Number.NaN, false],
  ['priority', '3', false],
  ['waitTimeoutMs', 0, true],
  ['waitTimeoutMs', 2_147_483_647, true],
  ['waitTimeoutMs', 2_147_483_648, false],
  ['waitTimeoutMs', -1, false],
  ['waitTimeoutMs', 0.5, false],
  ['waitTimeoutMs', Infinity, false],
  ['holdAtLeastMs', 0, true],
  ['holdAtLeastMs', 2_147_483_647, true],
  ['holdAtLeastMs', 2_147_483_648, false],
  ['holdAtLeastMs', -1, false],
  ['holdAtLeastMs', 2.5, false],
  ['holdAtLeastMs', '10', false],
  ['preempt', true, true],
  ['preempt', false, true],
  ['preempt', 'yes', false],
  ['preempt', 1, false],
  ['preemptGraceMs', 0, true],
  ['preemptGraceMs', 2_147_483_647, true],
  ['preemptGraceMs', 2_147_483_648, false],
  ['preemptGraceMs', -1, false],
  ['preemptGraceMs', 1.5, false],
  ['preemptGraceMs', '100', false],
];

const thrown = (check: () => unknown): unknown => {
  try {
    check();
    return undefined;
  } catch (error) {
    return error;
  }
};

describe('call input: the same rules at decoration and per call', () => {
  it.each(TABLE)('%s = %p: valid %p in both entry points', (name, value, valid) => {
    const perCall = thrown(() => checkCall(name, value));
    const declared = thrown(() => checkDeclared(name, value));
    const decorated = thrown(() => exclusiveMetadata('k', { [name]: value }));
    if (valid) {
      expect([perCall, declared, decorated]).toEqual([undefined, undefined, undefined]);
      return;
    }
    expect(perCall).toBeInstanceOf(LeaseArgumentError);
    expect(declared).toBeInstanceOf(LeaseConfigError);
    expect(decorated).toBeInstanceOf(LeaseConfigError);
    // The same advice, named after the decorator where it was declared.
    expect((declared as Error).message).toBe(`@Exclusive ${(perCall as Error).message}`);
    expect((decorated as Error).message).toBe((declared as Error).message);
  });

  it('a priority given as the second argument follows the same rule', () => {
    expect(() => exclusiveMetadata('k', 2_147_483_648)).toThrow(LeaseConfigError);
    expect(exclusiveMetadata('k', 7)).toEqual({ targetKey: 'k', priority: 7 });
  });

  it('the messages are the per-call ones, byte for byte', () => {
    expect(thrown(() => checkCall('priority', 1.5))).toHaveProperty(
      'message',
      'priority must be an integer between -2147483648 and 2147483647, got 1.5',
    );
    expect(thrown(() => checkCall('holdAtLeastMs', '10'))).toHaveProperty(
      'message',
      'holdAtLeastMs must be a non-negative integer number of milliseconds (at most 2147483647), got "10"',
    );
  });
});

describe('preemption options', () => {
  it('per call: no grace unless preempt is true; its own grace, else the module default', () => {
    expect(preemptGraceOf({}, 600)).toBeUndefined();
    expect(preemptGraceOf({ preempt: false, preemptGraceMs: 5 }, 600)).toBeUndefined();
    expect(preemptGraceOf({ preempt: true }, 600)).toBe(600);
    expect(preemptGraceOf({ preempt: true, preemptGraceMs: 0 }, 600)).toBe(0);
  });

  it('per call: a bad value, or a preempting join, is a LeaseArgumentError', () => {
    expect(thrown(() => preemptGraceOf({ preempt: 'yes' as never }, 600))).toBeInstanceOf(LeaseArgumentError);
    expect(thrown(() => preemptGraceOf({ preempt: true, preemptGraceMs: -1 }, 600))).toBeInstanceOf(LeaseArgumentError);
    // Checked even when the call does not preempt: a typo never passes silently.
    expect(thrown(() => preemptGraceOf({ preemptGraceMs: -1 }, 600))).toBeInstanceOf(LeaseArgumentError);
    const join = thrown(() => preemptGraceOf({ preempt: true, onBusy: 'join' }, 600));
    expect(join).toBeInstanceOf(LeaseArgumentError);
    expect((join as Error).message).toMatch(/onBusy 'join'/);
    // A semaphore's slots have no single holder to preempt.
    const slots = thrown(() => preemptGraceOf({ preempt: true, limit: 2 }, 600));
    expect(slots).toBeInstanceOf(LeaseArgumentError);
    expect((slots as Error).message).toMatch(/limit above 1 cannot be combined with preempt/);
    expect(preemptGraceOf({ preempt: true, limit: 1 }, 600)).toBe(600);
  });

  it('at decoration: preempt with onBusy join or skip, or with sticky, is a LeaseConfigError', () => {
    expect(thrown(() => exclusiveMetadata('k', { preempt: true, limit: 3 }))).toBeInstanceOf(LeaseConfigError);
    for (const onBusy of ['join', 'skip'] as const) {
      expect(thrown(() => exclusiveMetadata('k', { preempt: true, onBusy }))).toBeInstanceOf(LeaseConfigError);
    }
    expect(thrown(() => exclusiveMetadata('k', { preempt: true, sticky: true }))).toBeInstanceOf(LeaseConfigError);
    expect(exclusiveMetadata('k', { preempt: true, onBusy: 'throw', priority: 3 })).toEqual({
      targetKey: 'k',
      preempt: true,
      onBusy: 'throw',
      priority: 3,
    });
  });

  it('the decoration carries preempt and its grace to the call', () => {
    const metadata = exclusiveMetadata('k', { priority: 9, preempt: true, preemptGraceMs: 250 });
    expect(acquireOptionsOf(metadata)).toEqual({ priority: 9, preempt: true, preemptGraceMs: 250 });
  });
});
