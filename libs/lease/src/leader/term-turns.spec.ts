import { jest } from '@jest/globals';
import { LeaseShutdownError, LeaseWaitTimeoutError } from '../errors/lease.errors.js';
import { TermTurns } from './term-turns.js';

/** The turns alone: one call at a time, a line by priority then arrival, bounded waits, and a close that ends them. */
describe('TermTurns', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  const outcome = (work: Promise<void>) => {
    const state: { done?: boolean; error?: unknown } = {};
    work.then(
      () => (state.done = true),
      (error: unknown) => (state.error = error),
    );
    return state;
  };
  const flush = async () => {
    for (let i = 0; i < 5; i++) await Promise.resolve();
  };

  it('takes a free turn, refuses a held one, and frees it on give()', () => {
    const turns = new TermTurns();
    expect(turns.tryTake()).toBe(true);
    expect(turns.busy).toBe(true);
    expect(turns.tryTake()).toBe(false);
    turns.give();
    expect(turns.busy).toBe(false);
    expect(turns.tryTake()).toBe(true);
  });

  it('hands the turn to the waiters by priority, then by arrival; idle() once the last gives it back', async () => {
    const turns = new TermTurns();
    turns.tryTake();
    const order: string[] = [];
    const wait = (name: string, priority: number) =>
      void turns.take('k', priority, 10_000).then(() => order.push(name));
    wait('low-1', 0);
    wait('high', 5);
    wait('low-2', 0);
    // A newcomer does not pass the line.
    turns.give();
    expect(turns.tryTake()).toBe(false);
    await flush();
    expect(order).toEqual(['high']);
    const idle = outcome(turns.idle());
    turns.give();
    await flush();
    turns.give();
    await flush();
    expect(order).toEqual(['high', 'low-1', 'low-2']);
    expect(idle.done).toBeUndefined();
    turns.give();
    await flush();
    expect(idle.done).toBe(true);
    expect(turns.busy).toBe(false);
  });

  it('ends a wait at its timeout or its signal, leaving the line behind it intact', async () => {
    const turns = new TermTurns();
    turns.tryTake();
    const impatient = outcome(turns.take('k', 0, 300));
    const controller = new AbortController();
    const cancelled = outcome(turns.take('k', 0, 10_000, controller.signal));
    const patient = outcome(turns.take('k', 0, 10_000));
    jest.advanceTimersByTime(299);
    await flush();
    expect(impatient.error).toBeUndefined();
    jest.advanceTimersByTime(1);
    await flush();
    expect(impatient.error).toBeInstanceOf(LeaseWaitTimeoutError);
    controller.abort(new Error('gone'));
    await flush();
    expect((cancelled.error as Error).message).toBe('gone');
    turns.give();
    await flush();
    expect(patient.done).toBe(true);
  });

  it('close() ends every waiting call with its error, and no call takes a turn afterwards', async () => {
    const turns = new TermTurns();
    turns.tryTake();
    const waiting = outcome(turns.take('k', 0, 10_000));
    const error = new LeaseShutdownError('k');
    turns.close(error);
    await flush();
    expect(waiting.error).toBe(error);
    await expect(turns.take('k', 0, 10_000)).rejects.toBe(error);
    turns.give();
    expect(turns.busy).toBe(false);
    expect(turns.tryTake()).toBe(false);
  });
});
