import { jest } from '@jest/globals';
import { isStatementError } from '../errors/database-errors.js';
import { GroupCommit, type ItemOutcome } from './group-commit.js';

const turn = () => new Promise((resolve) => setImmediate(resolve));
const ok = <O>(value: O): ItemOutcome<O> => ({ ok: true, value });

/** Group commit, driven deterministically: what goes together, what each caller gets, and when a batch is split. */
describe('GroupCommit', () => {
  const options = { maxBatch: 3, maxInFlight: 1, stallMs: 1_000, splittable: isStatementError };

  it('sends the calls of one turn of the event loop together, each caller getting its own outcome', async () => {
    const send = jest.fn(async (items: number[]) => items.map((item) => ok(item * 10)));
    const group = new GroupCommit(send, options);
    const results = await Promise.all([group.submit(1), group.submit(2)]);
    expect(results).toEqual([10, 20]);
    expect(send.mock.calls).toEqual([[[1, 2]]]);
    expect(group.stats).toEqual({ batches: 1, items: 2, largest: 2, splits: 0 });
  });

  it('a lone call goes alone', async () => {
    const send = jest.fn(async (items: string[]) => items.map(ok));
    const group = new GroupCommit(send, options);
    await expect(group.submit('a')).resolves.toBe('a');
    await expect(group.submit('b')).resolves.toBe('b');
    expect(send.mock.calls).toEqual([[['a']], [['b']]]);
  });

  it("a lone caller's next call goes at once, without waiting for the turn; a burst then queues behind it", async () => {
    const send = jest.fn(async (items: string[]) => items.map(ok));
    const group = new GroupCommit(send, options);
    // The first call of a group waits for its turn (a burst at start-up goes together).
    const first = group.submit('a');
    expect(send).not.toHaveBeenCalled();
    await first;
    // The last batch was a single call, nothing is in flight or queued: the next call is sent before submit returns.
    const second = group.submit('b');
    expect(send.mock.calls).toEqual([[['a']], [['b']]]);
    await second;
    // A burst after a lone call: its first call goes at once, the others of the turn together behind it.
    const burst = ['c', 'd', 'e'].map((item) => group.submit(item));
    expect(send.mock.calls.slice(2)).toEqual([[['c']]]);
    await expect(Promise.all(burst)).resolves.toEqual(['c', 'd', 'e']);
    expect(send.mock.calls.slice(2)).toEqual([[['c']], [['d', 'e']]]);
    // After a batch of two, the next call waits for the turn again (a burst's rhythm, not a lone caller's).
    const after = group.submit('f');
    expect(send.mock.calls).toHaveLength(4);
    await after;
    expect(send.mock.calls.slice(4)).toEqual([[['f']]]);
  });

  it('calls queued behind a batch in flight go in the next batch, at most maxBatch at a time', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const sent: number[][] = [];
    const group = new GroupCommit(async (items: number[]) => {
      sent.push(items);
      if (items[0] === 0) await gate;
      return items.map(ok);
    }, options);
    const first = group.submit(0);
    await turn();
    const queued = [1, 2, 3, 4, 5].map((n) => group.submit(n));
    release();
    await Promise.all([first, ...queued]);
    expect(sent).toEqual([[0], [1, 2, 3], [4, 5]]);
  });

  it('a batch failing with a statement error is split: each item alone, so only the bad one fails', async () => {
    const group = new GroupCommit(async (items: string[]) => {
      if (items.includes('bad')) throw Object.assign(new Error('bad row'), { code: 'P0001' });
      return items.map(ok);
    }, options);
    const outcomes = await Promise.allSettled(['a', 'bad', 'c'].map((item) => group.submit(item)));
    expect(outcomes.map((outcome) => outcome.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(group.stats.splits).toBe(1);
  });

  it('a batch failing otherwise (connection lost: outcome unknown) fails every caller with that error', async () => {
    const lost = new Error('Connection terminated');
    const send = jest.fn(async () => Promise.reject(lost));
    const group = new GroupCommit(send, options);
    const outcomes = await Promise.allSettled([group.submit(1), group.submit(2)]);
    expect(outcomes).toEqual([
      { status: 'rejected', reason: lost },
      { status: 'rejected', reason: lost },
    ]);
    expect(send).toHaveBeenCalledTimes(1);
  });

  it('an item outcome may be an error of its own; a missing outcome is reported as a bug', async () => {
    const own = new Error('refused');
    const group = new GroupCommit(async () => [{ ok: false, error: own }] as Array<ItemOutcome<number>>, options);
    const outcomes = await Promise.allSettled([group.submit(1), group.submit(2)]);
    expect(outcomes[0]).toEqual({ status: 'rejected', reason: own });
    expect(String((outcomes[1] as PromiseRejectedResult).reason)).toMatch(/returned no outcome/);
  });

  it('a batch stalled past stallMs stops holding back the calls queued behind it', async () => {
    const sent: number[][] = [];
    const group = new GroupCommit(
      async (items: number[]) => {
        sent.push(items);
        if (items[0] === 0) await new Promise(() => undefined);
        return items.map(ok);
      },
      { ...options, stallMs: 30 },
    );
    void group.submit(0);
    await turn();
    const behind = group.submit(1);
    await turn();
    expect(sent).toEqual([[0]]);
    await expect(behind).resolves.toBe(1);
    expect(sent).toEqual([[0], [1]]);
  });

  it('refuses a batch size or an in-flight count below one', () => {
    const send = async () => [];
    expect(() => new GroupCommit(send, { ...options, maxBatch: 0 })).toThrow(RangeError);
    expect(() => new GroupCommit(send, { ...options, maxInFlight: 1.5 })).toThrow(RangeError);
  });
});
