import {
  estimateRetryAfterMs,
  RETRY_AFTER_DEFAULT_MS,
  RETRY_AFTER_MIN_MS,
  RetryAfterEstimates,
} from './retry-after.js';

/** The rule of docs/errors-and-http.md ("Retry-After"), case by case, and the estimates the engine feeds. */
describe('estimateRetryAfterMs', () => {
  const timeout = 120_000;
  const none = { localAgesMs: [], holdMs: 0 };

  it.each<[string, Parameters<typeof estimateRetryAfterMs>[0], number]>([
    ['nothing known: the default', none, RETRY_AFTER_DEFAULT_MS],
    ['a hold tail left: what is left of it', { ...none, holdLeftMs: 3_210.4 }, 3_211],
    ['a hold tail wins over the history', { ...none, holdLeftMs: 2_500, typicalMs: 60_000 }, 2_500],
    ['another process holds it: the typical hold', { ...none, typicalMs: 1_500 }, 1_500],
    ["another process: the call's own holdAtLeastMs when longer", { ...none, typicalMs: 1_500, holdMs: 9_000 }, 9_000],
    ['this process holds it: typical minus its age', { localAgesMs: [400], typicalMs: 2_500, holdMs: 0 }, 2_100],
    [
      'this process, several slots: the first to finish',
      { localAgesMs: [400, 2_000], typicalMs: 2_500, holdMs: 0 },
      1_000,
    ],
    ['this process, past its typical hold: the default', { localAgesMs: [9_000], typicalMs: 2_500, holdMs: 0 }, 5_000],
    ['at least one second', { ...none, typicalMs: 30 }, RETRY_AFTER_MIN_MS],
    ['at most the lease timeout', { ...none, typicalMs: 600_000 }, timeout],
    ['a tail longer than the lease timeout: capped', { ...none, holdLeftMs: 500_000 }, timeout],
  ])('%s', (_, facts, expected) => {
    expect(estimateRetryAfterMs(facts, timeout)).toBe(expected);
  });
});

describe('RetryAfterEstimates', () => {
  /** The engine's held leases, by lease token (a refusal looks its key's holders up there). */
  const nothingHeld = new Map<string, { targetKey: string; acquiredAt: number }>();
  const request = (targetKey: string, keyTemplate = 'job:{id}', holdMs = 0) => ({ targetKey, keyTemplate, holdMs });

  it("the median of the key's recent holds, else its template's, else the default", () => {
    const estimates = new RetryAfterEstimates(120_000, nothingHeld);
    expect(estimates.estimate(request('job:1'))).toBe(RETRY_AFTER_DEFAULT_MS);
    for (const heldMs of [2_000, 9_000, 3_000]) {
      estimates.granted('job:1');
      estimates.released('job:1', 'job:{id}', heldMs);
    }
    expect(estimates.estimate(request('job:1'))).toBe(3_000);
    // Another key of the template: the template's holds.
    expect(estimates.estimate(request('job:2'))).toBe(3_000);
    // A key without a template ('(none)'): its own holds only.
    expect(estimates.estimate(request('other', '(none)'))).toBe(RETRY_AFTER_DEFAULT_MS);
  });

  it('keeps the last 8 holds of a key, and the 1,000 keys most recently released', () => {
    const estimates = new RetryAfterEstimates(120_000, nothingHeld);
    for (const heldMs of [90_000, 90_000, 90_000, 2_000, 2_000, 2_000, 2_000, 2_000, 2_000, 2_000, 2_000]) {
      estimates.released('job:1', '(none)', heldMs);
    }
    // The three long holds fell out of the window of eight.
    expect(estimates.estimate(request('job:1', '(none)'))).toBe(2_000);
    for (let i = 0; i < 1_000; i++) estimates.released(`other:${i}`, '(none)', 7_000);
    // 1,000 keys released since: job:1 made room (its holds forgotten), the last of them are kept.
    expect(estimates.estimate(request('job:1', '(none)'))).toBe(RETRY_AFTER_DEFAULT_MS);
    expect(estimates.estimate(request('other:999', '(none)'))).toBe(7_000);
    expect(estimates.estimate(request('other:0', '(none)'))).toBe(7_000);
  });

  it("a holder in this process counts its age; a hold tail refusal is used until the key's next grant", () => {
    const held = new Map<string, { targetKey: string; acquiredAt: number }>();
    const estimates = new RetryAfterEstimates(120_000, held);
    estimates.released('job:1', 'job:{id}', 4_000);
    held.set('token-1', { targetKey: 'job:1', acquiredAt: performance.now() });
    held.set('token-2', { targetKey: 'job:2', acquiredAt: performance.now() - 3_500 });
    const left = estimates.estimate(request('job:1'));
    expect(left).toBeGreaterThan(3_900);
    expect(left).toBeLessThanOrEqual(4_000);
    // job:2's holder, 3.5 s into the template's typical 4 s: half a second left, answered as the shortest answer.
    expect(estimates.estimate(request('job:2'))).toBe(RETRY_AFTER_MIN_MS);
    held.delete('token-1');
    expect(estimates.estimate(request('job:1'))).toBe(4_000);
    estimates.refused('job:9', 2_000);
    expect(estimates.estimate(request('job:9'))).toBeLessThanOrEqual(2_000);
    // A grant of the key ends what the refusal said: the template's typical hold again.
    estimates.granted('job:9');
    expect(estimates.estimate(request('job:9'))).toBe(4_000);
  });

  it("the call's own retryAfterMs: a number as is; a function of the estimate; an unusable answer leaves it", () => {
    const estimates = new RetryAfterEstimates(120_000, nothingHeld);
    expect(estimates.answer(request('k'), 42)).toBe(42);
    expect(estimates.answer(request('k'), ({ estimatedMs }) => estimatedMs * 2)).toBe(10_000);
    for (const bad of [NaN, -1, Infinity, '7' as unknown as number]) {
      expect(estimates.answer(request('k'), () => bad)).toBe(RETRY_AFTER_DEFAULT_MS);
    }
  });
});
