import type { LeaseEvent } from '../interfaces/lease-event.interface.js';
import {
  estimateRetryAfterMs,
  RETRY_AFTER_DEFAULT_MS,
  RETRY_AFTER_MIN_MS,
  RetryAfterEstimates,
} from './retry-after.js';

/** The rule of docs/errors-and-http.md ("Retry-After"), case by case, and the estimates an engine's events feed. */
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
  const at = new Date();
  const granted = (targetKey: string, fencingToken: bigint, keyTemplate = 'job:{id}'): LeaseEvent => ({
    type: 'acquired',
    targetKey,
    keyTemplate,
    fencingToken,
    priority: 0,
    owner: 'me',
    at,
  });
  const released = (targetKey: string, fencingToken: bigint, heldMs: number, keyTemplate = 'job:{id}'): LeaseEvent => ({
    type: 'released',
    targetKey,
    keyTemplate,
    fencingToken,
    heldMs,
    at,
  });
  const request = (targetKey: string, keyTemplate = 'job:{id}', holdMs = 0) => ({ targetKey, keyTemplate, holdMs });

  it("the median of the key's recent holds, else its template's, else the default", () => {
    const estimates = new RetryAfterEstimates(120_000);
    expect(estimates.estimate(request('job:1'))).toBe(RETRY_AFTER_DEFAULT_MS);
    for (const [token, heldMs] of [
      [1n, 2_000],
      [2n, 9_000],
      [3n, 3_000],
    ] as const) {
      estimates.observe(granted('job:1', token));
      estimates.observe(released('job:1', token, heldMs));
    }
    expect(estimates.estimate(request('job:1'))).toBe(3_000);
    // Another key of the template: the template's holds.
    expect(estimates.estimate(request('job:2'))).toBe(3_000);
    // A key without a template ('(none)'): its own holds only.
    expect(estimates.estimate(request('other', '(none)'))).toBe(RETRY_AFTER_DEFAULT_MS);
  });

  it('a loss is no hold length; a grant in this process counts its age; a hold tail refusal is used once fresh', () => {
    const estimates = new RetryAfterEstimates(120_000);
    estimates.observe(granted('job:1', 1n));
    estimates.observe({ ...released('job:1', 1n, 50_000), type: 'lost', reason: 'taken-over' } as LeaseEvent);
    expect(estimates.estimate(request('job:1'))).toBe(RETRY_AFTER_DEFAULT_MS);
    estimates.observe(granted('job:1', 2n));
    estimates.observe(released('job:1', 2n, 4_000));
    estimates.observe(granted('job:1', 3n));
    const held = estimates.estimate(request('job:1'));
    expect(held).toBeGreaterThan(3_900);
    expect(held).toBeLessThanOrEqual(4_000);
    estimates.refused('job:9', 2_000);
    expect(estimates.estimate(request('job:9'))).toBeLessThanOrEqual(2_000);
    // A grant of the key ends what the refusal said.
    estimates.observe(granted('job:9', 4n));
    expect(estimates.estimate(request('job:9'))).toBeGreaterThan(2_000);
  });

  it("the call's own retryAfterMs: a number as is; a function of the estimate; an unusable answer leaves it", () => {
    const estimates = new RetryAfterEstimates(120_000);
    expect(estimates.answer(request('k'), 42)).toBe(42);
    expect(estimates.answer(request('k'), ({ estimatedMs }) => estimatedMs * 2)).toBe(10_000);
    for (const bad of [NaN, -1, Infinity, '7' as unknown as number]) {
      expect(estimates.answer(request('k'), () => bad)).toBe(RETRY_AFTER_DEFAULT_MS);
    }
  });
});
