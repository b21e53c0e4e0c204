/**
 * When a refused caller may try again (`LeaseBusyError.retryAfterMs`, sent as `Retry-After`): an estimate of when the
 * key is free, from what this process knows of it (docs/errors-and-http.md, "Retry-After"), or the call's own
 * `retryAfterMs`. The engine tells it its grants and releases as they happen (not through its events: those are
 * built only when someone listens); nothing here touches the database.
 */
import type { RetryAfter } from '../interfaces/refusable-call.interface.js';
import { NO_KEY_TEMPLATE } from '../options/call-input.js';

/** The shortest answer: `Retry-After` counts whole seconds, and 0 would invite a retry loop. */
export const RETRY_AFTER_MIN_MS = 1_000;
/** The answer when nothing is known of the key: no hold of it (or of its template) seen here, no hold tail. */
export const RETRY_AFTER_DEFAULT_MS = 5_000;
/** Recent holds kept per key and per key template; keys and templates remembered (least recently held go first). */
const HOLDS_KEPT = 8;
const KEYS_KEPT = 1_000;
const TEMPLATES_KEPT = 200;

/** What a refusal of the key said, and when: the hold tail left when the key was free but for it. */
interface Refusal {
  readonly holdLeftMs: number;
  readonly at: number;
}

/** Newest last, at most `HOLDS_KEPT`; the map keeps its `limit` most recently touched names. */
function remember(map: Map<string, number[]>, name: string, heldMs: number, limit: number): void {
  const holds = map.get(name);
  if (holds === undefined) {
    // A name not seen lately (every call of a key per call): the least recently touched one makes room.
    if (map.size >= limit) map.delete(map.keys().next().value!);
    map.set(name, [heldMs]);
    return;
  }
  map.delete(name);
  holds.push(heldMs);
  if (holds.length > HOLDS_KEPT) holds.shift();
  map.set(name, holds);
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

/**
 * The estimate of when a busy key is free, in milliseconds, bounded by `RETRY_AFTER_MIN_MS` and `leaseTimeoutMs`:
 * 1. the key was refused for its hold tail alone (`holdAtLeastMs` of the last acquisition): what is left of the tail;
 * 2. this process holds it: the typical hold of the key (the median of its recent holds here, else of its template's)
 *    minus the holder's age, or what is left of the refused call's own `holdAtLeastMs` from the holder's acquisition,
 *    whichever is later; a holder past both: the default;
 * 3. another process holds it: the typical hold (its age is unknown here), or the refused call's `holdAtLeastMs` if
 *    longer;
 * 4. nothing known: `RETRY_AFTER_DEFAULT_MS`.
 */
export function estimateRetryAfterMs(
  facts: {
    readonly holdLeftMs?: number;
    /** Ages of this process's holders of the key (a semaphore's several slots), in ms. */
    readonly localAgesMs: readonly number[];
    readonly typicalMs?: number;
    /** The refused call's `holdAtLeastMs` (a caller of the same declaration holds with the same tail). */
    readonly holdMs: number;
  },
  leaseTimeoutMs: number,
): number {
  const bounded = (ms: number) => Math.min(Math.max(Math.ceil(ms), RETRY_AFTER_MIN_MS), leaseTimeoutMs);
  if (facts.holdLeftMs !== undefined && facts.holdLeftMs > 0) return bounded(facts.holdLeftMs);
  const busyMs = Math.max(facts.typicalMs ?? 0, facts.holdMs);
  if (busyMs <= 0) return bounded(RETRY_AFTER_DEFAULT_MS);
  if (facts.localAgesMs.length === 0) return bounded(busyMs);
  // The first of this process's holders to finish frees the key (a slot of it).
  const leftMs = Math.min(...facts.localAgesMs.map((ageMs) => busyMs - ageMs));
  return bounded(leftMs > 0 ? leftMs : RETRY_AFTER_DEFAULT_MS);
}

/**
 * What this process knows of each key's holds, as its engine tells it, and the answers built from it. This process's
 * own holders of a key (their ages) are asked of the engine when an answer is built: a refusal pays for that lookup,
 * not every grant.
 */
export class RetryAfterEstimates {
  private readonly byKey = new Map<string, number[]>();
  private readonly byTemplate = new Map<string, number[]>();
  private readonly refusals = new Map<string, Refusal>();

  constructor(
    private readonly leaseTimeoutMs: number,
    /** This process's held leases (the engine's, by lease token): a semaphore's several slots of a key, say. */
    private readonly held: ReadonlyMap<string, { readonly targetKey: string; readonly acquiredAt: number }>,
  ) {}

  /** A grant of `targetKey` here: what an earlier refusal said of its hold tail is over. */
  granted(targetKey: string): void {
    if (this.refusals.size > 0) this.refusals.delete(targetKey);
  }

  /**
   * A release of a lease held `heldMs`: a hold of its key and of its template. A loss is not told: it says how long
   * the holder held before something else ended it, not how long its work takes.
   */
  released(targetKey: string, keyTemplate: string, heldMs: number): void {
    remember(this.byKey, targetKey, heldMs, KEYS_KEPT);
    if (keyTemplate !== NO_KEY_TEMPLATE) remember(this.byTemplate, keyTemplate, heldMs, TEMPLATES_KEPT);
  }

  /** A refused attempt on `targetKey` that reported the hold tail left (the key free but for it). */
  refused(targetKey: string, holdLeftMs: number | null): void {
    if (holdLeftMs === null) return;
    this.refusals.delete(targetKey);
    this.refusals.set(targetKey, { holdLeftMs, at: performance.now() });
    if (this.refusals.size > KEYS_KEPT) this.refusals.delete(this.refusals.keys().next().value!);
  }

  /** The estimate for a refused call (see `estimateRetryAfterMs`). */
  estimate(request: { readonly targetKey: string; readonly keyTemplate: string; readonly holdMs: number }): number {
    const { targetKey, keyTemplate, holdMs } = request;
    const now = performance.now();
    const refusal = this.refusals.get(targetKey);
    const holds = this.byKey.get(targetKey) ?? this.byTemplate.get(keyTemplate);
    return estimateRetryAfterMs(
      {
        holdLeftMs: refusal && refusal.holdLeftMs - (now - refusal.at),
        localAgesMs: this.localAgesMs(targetKey, now),
        typicalMs: holds && median(holds),
        holdMs,
      },
      this.leaseTimeoutMs,
    );
  }

  /** The ages of this process's holders of `targetKey`: looked up when an answer is built, not kept per grant. */
  private localAgesMs(targetKey: string, now: number): number[] {
    const ages: number[] = [];
    for (const lease of this.held.values()) if (lease.targetKey === targetKey) ages.push(now - lease.acquiredAt);
    return ages;
  }

  /** The answer for a refused call: its own `retryAfterMs` when it has one, else the estimate. */
  answer(
    request: { readonly targetKey: string; readonly keyTemplate: string; readonly holdMs: number },
    own?: RetryAfter,
  ): number {
    if (typeof own === 'number') return own;
    const estimatedMs = this.estimate(request);
    if (own === undefined) return estimatedMs;
    const chosen = own({ targetKey: request.targetKey, estimatedMs });
    // A function that answers nothing usable: the estimate (docs/errors-and-http.md).
    return typeof chosen === 'number' && Number.isFinite(chosen) && chosen >= 0 ? chosen : estimatedMs;
  }
}
