import { jest } from '@jest/globals';
import { isStatementError } from '../errors/database-errors.js';
import { GroupCommit, type ItemOutcome, ReturnedBatches } from './group-commit.js';

const turn = () => new Promise((resolve) => setImmediate(resolve));
const ok = <O>(value: O): ItemOutcome<O> => ({ ok: true, value });

/** Group commit, driven deterministically: what goes together, what each caller gets, and when a batch is split. */
describe('GroupCommit', () => {
  const options = { maxBatch: 3, maxInFlight: 1, stallMs: 1_000, splittable: isStatementError };

  it('a lone call on an idle queue is sent at once, in its own turn (no turn of the event loop waited for)', async () => {
    const send = jest.fn(async (items: string[]) => items.map(ok));
    const group = new GroupCommit(send, options);
    const a = group.submit('a');
    expect(send.mock.calls).toEqual([[['a']]]);
    await expect(a).resolves.toBe('a');
    const b = group.submit('b');
    expect(send.mock.calls).toEqual([[['a']], [['b']]]);
    await expect(b).resolves.toBe('b');
  });

  it('the calls made while the first is in flight go together in the next batch, each getting its own outcome', async () => {
    const send = jest.fn(async (items: number[]) => items.map((item) => ok(item * 10)));
    const group = new GroupCommit(send, options);
    const results = await Promise.all([group.submit(1), group.submit(2), group.submit(3)]);
    expect(results).toEqual([10, 20, 30]);
    expect(send.mock.calls).toEqual([[[1]], [[2, 3]]]);
    expect(group.stats).toEqual({ batches: 2, items: 3, largest: 2, splits: 0 });
  });

  it('the callers of a batch of several, moving on in the same turn, go together — on the other kind too', async () => {
    const returned = new ReturnedBatches();
    const acquired = jest.fn(async (items: number[]) => items.map(ok));
    const released = jest.fn(async (items: number[]) => items.map(ok));
    const acquisitions = new GroupCommit(acquired, options, returned);
    const releases = new GroupCommit(released, options, returned);
    const first = acquisitions.submit(0);
    // Three callers queue behind the first; their batch of three returns, and each moves on to its release at once.
    await Promise.all([first, ...[1, 2, 3].map((n) => acquisitions.submit(n).then((m) => releases.submit(m)))]);
    expect(acquired.mock.calls).toEqual([[[0]], [[1, 2, 3]]]);
    // Not the first release alone and the two others behind it: the three went in one batch, at the end of the turn.
    expect(released.mock.calls).toEqual([[[1, 2, 3]]]);
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
    const send = jest.fn(async (items: number[]) => (items[0] === 0 ? items.map(ok) : Promise.reject(lost)));
    const group = new GroupCommit(send, options);
    // The first call goes at once, alone; the two made meanwhile go together and share the batch's fate.
    const outcomes = await Promise.allSettled([group.submit(0), group.submit(1), group.submit(2)]);
    expect(outcomes).toEqual([
      { status: 'fulfilled', value: 0 },
      { status: 'rejected', reason: lost },
      { status: 'rejected', reason: lost },
    ]);
    expect(send.mock.calls).toEqual([[[0]], [[1, 2]]]);
  });

  it('an item outcome may be an error of its own; a missing outcome is reported as a bug', async () => {
    const own = new Error('refused');
    const group = new GroupCommit(
      async (items: number[]) =>
        items[0] === 0 ? items.map(ok) : ([{ ok: false, error: own }] as ItemOutcome<number>[]),
      options,
    );
    // The first call goes alone; the two made while it is in flight go together.
    const outcomes = await Promise.allSettled([group.submit(0), group.submit(1), group.submit(2)]);
    expect(outcomes[1]).toEqual({ status: 'rejected', reason: own });
    expect(String((outcomes[2] as PromiseRejectedResult).reason)).toMatch(/returned no outcome/);
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
