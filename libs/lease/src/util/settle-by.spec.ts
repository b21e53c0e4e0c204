import { jest } from '@jest/globals';
import { longTimeout, settleBy } from './settle-by.js';

describe('settleBy', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  const timeout = () => new Error('timed out');

  it('settles with the work when it comes first', async () => {
    await expect(settleBy(Promise.resolve(7), performance.now() + 1_000, undefined, timeout)).resolves.toBe(7);
    await expect(
      settleBy(Promise.reject(new Error('boom')), performance.now() + 1_000, undefined, timeout),
    ).rejects.toThrow('boom');
  });

  it('rejects with onTimeout() when the deadline passes first, and hands a late value to discard', async () => {
    let finish!: (value: string) => void;
    const work = new Promise<string>((resolve) => (finish = resolve));
    const discarded: string[] = [];
    const settled = settleBy(work, performance.now() + 100, undefined, timeout, (late) => discarded.push(late));
    jest.advanceTimersByTime(100);
    await expect(settled).rejects.toThrow('timed out');
    finish('late lease');
    await Promise.resolve();
    await Promise.resolve();
    expect(discarded).toEqual(['late lease']);
  });

  it("rejects with the signal's reason on abort (also when already aborted)", async () => {
    const controller = new AbortController();
    const pending = settleBy(new Promise(() => undefined), performance.now() + 10_000, controller.signal, timeout);
    controller.abort(new Error('caller left'));
    await expect(pending).rejects.toThrow('caller left');
    await expect(
      settleBy(new Promise(() => undefined), performance.now() + 10_000, controller.signal, timeout),
    ).rejects.toThrow('caller left');
  });

  it('does not discard the value of work that won', async () => {
    const discard = jest.fn();
    await settleBy(Promise.resolve(1), performance.now() + 10, undefined, timeout, discard);
    jest.advanceTimersByTime(100);
    expect(discard).not.toHaveBeenCalled();
  });
});

describe('longTimeout', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('waits past setTimeout’s 2^31 − 1 ms range instead of firing at once', () => {
    const fired = jest.fn();
    longTimeout(fired, 2 ** 31 + 5_000);
    jest.advanceTimersByTime(2 ** 31 - 1);
    expect(fired).not.toHaveBeenCalled();
    jest.advanceTimersByTime(5_001);
    expect(fired).toHaveBeenCalledTimes(1);
  });

  it('can be cancelled', () => {
    const fired = jest.fn();
    const cancel = longTimeout(fired, 50);
    cancel();
    jest.advanceTimersByTime(100);
    expect(fired).not.toHaveBeenCalled();
  });
});
