import { jest } from '@jest/globals';
import { LeaseLostError } from '../errors/lease.errors.js';
import { BorrowedLease, HeldLease, type LeaseHandleOwner } from './held-lease.js';
import { LeaseContext } from './lease-context.js';

/** The lease handle's local deadline: confirmed renewals push it; nothing after it brings the lease back. */
describe('HeldLease', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  const fenced = jest.fn(async () => undefined);
  const release = jest.fn(async () => undefined);
  const owner = { fenced, release } as unknown as LeaseHandleOwner;

  function lease(limitMs = 1_000) {
    const onDeadline = jest.fn((expired: HeldLease) => expired.markLost('renewal-deadline'));
    const held = new HeldLease('k', 'token', 7n, performance.now(), limitMs, owner, onDeadline);
    return { held, onDeadline };
  }

  it('is held until the local limit after the acquisition was sent, then the deadline fires once', () => {
    const { held, onDeadline } = lease();
    jest.advanceTimersByTime(999);
    expect(held.isHeld()).toBe(true);
    jest.advanceTimersByTime(1);
    expect(onDeadline).toHaveBeenCalledTimes(1);
    expect(held.isHeld()).toBe(false);
    expect(held.lossReason).toBe('renewal-deadline');
    expect(held.signal.reason).toBeInstanceOf(LeaseLostError);
  });

  it('a confirmed renewal moves the deadline to its send time plus the limit', () => {
    const { held, onDeadline } = lease();
    jest.advanceTimersByTime(600);
    held.confirm(performance.now() - 100); // sent at 500
    jest.advanceTimersByTime(850); // 1450 < 1500
    expect(held.isHeld()).toBe(true);
    jest.advanceTimersByTime(50);
    expect(onDeadline).toHaveBeenCalledTimes(1);
  });

  it('ignores an older confirmation, and one that arrives after the deadline', () => {
    const { held } = lease();
    jest.advanceTimersByTime(500);
    held.confirm(performance.now());
    held.confirm(performance.now() - 400); // older than the last: no effect
    expect(held.deadline).toBe(1_500);
    jest.advanceTimersByTime(1_000);
    expect(held.isHeld()).toBe(false);
    held.confirm(performance.now());
    expect(held.isHeld()).toBe(false);
  });

  it('release aborts the signal with an AbortError, once; loss after release is ignored', () => {
    const { held } = lease();
    expect(held.markReleased()).toBe(true);
    expect(held.markReleased()).toBe(false);
    expect((held.signal.reason as DOMException).name).toBe('AbortError');
    expect(held.markLost('taken-over')).toBe(false);
    expect(held.lossReason).toBe('released');
  });

  it('a lease lost, then released, keeps the reason of its loss (its refusals say why it was lost)', () => {
    const { held } = lease();
    expect(held.markLost('preempted')).toBe(true);
    expect(held.markReleased()).toBe(true);
    expect(held.isHeld()).toBe(false);
    expect(held.lossReason).toBe('preempted');
    expect((held.signal.reason as LeaseLostError).reason).toBe('preempted');
  });

  it('fenced() and release() go to the engine that made it', async () => {
    const { held } = lease();
    const work = async () => 1;
    await held.fenced(work);
    await held.fenced(work, { release: true });
    await held.release();
    expect(fenced).toHaveBeenNthCalledWith(1, held, work, undefined);
    expect(fenced).toHaveBeenNthCalledWith(2, held, work, { release: true });
    expect(release).toHaveBeenCalledWith(held);
  });

  it('a borrowed lease shows the held one and never releases it', async () => {
    const { held } = lease();
    const borrowed = new BorrowedLease(held);
    expect([borrowed.targetKey, borrowed.token, borrowed.fencingToken, borrowed.signal]).toEqual([
      'k',
      'token',
      7n,
      held.signal,
    ]);
    release.mockClear();
    await borrowed.release();
    expect(release).not.toHaveBeenCalled();
    expect(borrowed.isHeld()).toBe(true);
  });

  it('watchLoss hears the reason the signal aborts with, the same object; a watcher stopped hears nothing', () => {
    const { held } = lease();
    const heard: unknown[] = [];
    const stopped = jest.fn();
    held.watchLoss((reason) => heard.push(reason));
    held.watchLoss(stopped)();
    expect(held.markLost('taken-over')).toBe(true);
    expect(heard).toHaveLength(1);
    expect(heard[0]).toBeInstanceOf(LeaseLostError);
    expect(held.signal.reason).toBe(heard[0]);
    expect(stopped).not.toHaveBeenCalled();
    // A lease lost already: told at once.
    held.watchLoss((reason) => heard.push(reason));
    expect(heard[1]).toBe(heard[0]);
  });

  it('watchLoss hears a release with a reason of its own (shutdown), not a plain release', () => {
    const plain = lease().held;
    const heard = jest.fn();
    plain.watchLoss(heard);
    plain.markReleased();
    plain.watchLoss(heard);
    expect(heard).not.toHaveBeenCalled();
    const shutdown = lease().held;
    const reason = new Error('shutdown');
    shutdown.watchLoss(heard);
    shutdown.markReleased(() => reason);
    expect(heard).toHaveBeenCalledWith(reason);
  });

  it('an end nobody hears builds no abort reason (no DOMException per call)', () => {
    const { held } = lease();
    const reason = jest.fn(() => new Error('built'));
    held.watchLoss(() => undefined)(); // watched while the work ran, then no more
    expect(held.markReleased(reason)).toBe(true);
    expect(reason).not.toHaveBeenCalled();
    expect((held.signal.reason as Error).message).toBe('built'); // built on the first read of the signal
    expect(reason).toHaveBeenCalledTimes(1);
    // A plain release heard by a loss watcher only (a fenced save releasing while @Exclusive watches): none either.
    const watched = lease().held;
    watched.watchLoss(() => undefined);
    const Original = globalThis.DOMException;
    let built = 0;
    globalThis.DOMException = class extends Original {
      constructor(...args: ConstructorParameters<typeof DOMException>) {
        super(...args);
        built++;
      }
    };
    try {
      watched.markReleased();
      expect(built).toBe(0);
      expect((watched.signal.reason as DOMException).name).toBe('AbortError');
      expect(built).toBe(1);
    } finally {
      globalThis.DOMException = Original;
    }
  });
});

describe('LeaseContext (the call chain’s leases)', () => {
  const fake = (targetKey: string, held = true) => ({ targetKey, isHeld: () => held }) as never;

  it('current() is the innermost lease; find() looks up the chain for a held lease of the key', async () => {
    const context = new LeaseContext();
    expect(context.current()).toBeUndefined();
    const outer = fake('a');
    const inner = fake('b');
    await context.run(outer, async () => {
      await Promise.resolve();
      await context.run(inner, async () => {
        await Promise.resolve();
        expect(context.current()).toBe(inner);
        expect(context.find('a')).toBe(outer);
        expect(context.find('c')).toBeUndefined();
      });
      expect(context.current()).toBe(outer);
    });
    expect(context.current()).toBeUndefined();
  });

  it('a lease no longer held is not reentrant', () => {
    const context = new LeaseContext();
    context.run(fake('a', false), () => expect(context.find('a')).toBeUndefined());
  });
});
