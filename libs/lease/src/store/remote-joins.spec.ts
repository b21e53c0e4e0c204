import { type JoinWatch, type ResultRow, runSeen } from './remote-joins.js';

/** A look's row: the target's fencing token, whether its holder is live, the outcome stored under it, a tail. */
const row = (token: number, live: boolean, outcome: unknown = null, holdLeftMs: number | null = null): ResultRow => ({
  token: String(token),
  live,
  outcome: outcome === null ? null : JSON.stringify({ kind: 'value', value: outcome }),
  hold_left_ms: holdLeftMs,
});

/**
 * Which run a join may settle with (issue 38 item 6): the live holder at its first look, or a run acquired after that
 * look — never a run that had ended before the call came, whatever outcome it left stored.
 */
describe('runSeen: the run a look offers a join', () => {
  it('first look, a live holder: the run to join (its outcome at once when already stored)', () => {
    expect(runSeen(row(7, true), {})).toEqual({ kind: 'run', fencingToken: 7n });
    expect(runSeen(row(7, true, { n: 1 }), {})).toEqual({ kind: 'value', value: { n: 1 }, fencingToken: 7n });
  });

  it("first look, no live holder: never the ended run's stored outcome; its token becomes the floor", () => {
    const watch: JoinWatch = {};
    expect(runSeen(row(7, false, { earlier: true }), watch)).toBeUndefined();
    expect(watch.floor).toBe(7n);
    // A hold's tail is no run either.
    const tail: JoinWatch = {};
    expect(runSeen(row(9, false, { earlier: true }, 1_200), tail)).toBeUndefined();
    expect(tail.floor).toBe(9n);
  });

  it('first look, no row: the floor is 0 (any run acquired later is one to join)', () => {
    const watch: JoinWatch = {};
    expect(runSeen(undefined, watch)).toBeUndefined();
    expect(watch.floor).toBe(0n);
    expect(runSeen(row(1, true), watch)).toEqual({ kind: 'run', fencingToken: 1n });
  });

  it('later looks: a run acquired since (a larger token) is joined, live or already ended with its outcome', () => {
    const watch: JoinWatch = { floor: 7n };
    expect(runSeen(row(7, false, { earlier: true }), watch)).toBeUndefined();
    expect(runSeen(row(8, true), watch)).toEqual({ kind: 'run', fencingToken: 8n });
    expect(runSeen(row(8, false, { later: true }), watch)).toEqual({
      kind: 'value',
      value: { later: true },
      fencingToken: 8n,
    });
    expect(watch.floor).toBe(7n);
  });

  it('later looks: a run acquired since that ended without an outcome raises the floor', () => {
    const watch: JoinWatch = { floor: 7n };
    expect(runSeen(row(8, false), watch)).toBeUndefined();
    expect(watch.floor).toBe(8n);
    expect(runSeen(row(8, false, { stale: true }), watch)).toBeUndefined();
  });
});
