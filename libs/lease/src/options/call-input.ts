/**
 * The rules of a call's values — the key, priority, holdAtLeastMs, limit, a policy's durations — and the one check of
 * a call's key and request. Which options a door takes and how its busy policy translates: `busy-policy.ts`.
 */
import { LeaseArgumentError, LeaseKeyError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import { INT32_MAX, INT32_MIN } from './limits.js';

import { MAX_TARGET_KEY_BYTES } from '../lease.constants.js';
import { EXCLUSIVE_LIMIT, MAX_SLOT_LIMIT, SHARED_LIMIT } from './slot-limits.js';

/** A UTF-16 surrogate without its other half: not encodable as UTF-8. */
export const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Checks a target key before any SQL runs: a well-formed string of 1–255 bytes of UTF-8 without NUL. */
export function assertTargetKey(targetKey: unknown): asserts targetKey is string {
  if (typeof targetKey !== 'string') {
    throw new LeaseKeyError(messages.keyNotString(targetKey === null ? 'null' : typeof targetKey));
  }
  if (targetKey.length === 0) {
    throw new LeaseKeyError(messages.keyEmpty());
  }
  if (targetKey.includes('\0')) {
    throw new LeaseKeyError(messages.keyNul(), targetKey.replace(/\0/g, '\\0'));
  }
  // Encoded to UTF-8, a lone surrogate becomes U+FFFD: two different keys would share one row, and the NOTIFY of a
  // release would name a key no waiter is waiting for.
  if (LONE_SURROGATE.test(targetKey)) {
    throw new LeaseKeyError(messages.keyLoneSurrogate(), targetKey.replace(new RegExp(LONE_SURROGATE, 'g'), '\uFFFD'));
  }
  const bytes = Buffer.byteLength(targetKey, 'utf8');
  if (bytes > MAX_TARGET_KEY_BYTES) {
    throw new LeaseKeyError(messages.keyTooLong(MAX_TARGET_KEY_BYTES, bytes), `${targetKey.slice(0, 40)}…`);
  }
}

/**
 * The rules of a call's values, one table for every door: per call (`LeaseArgumentError`) and at decoration
 * (`LeaseConfigError`), see `busy-policy.ts`. Each gives the message of a value that breaks it, or undefined; `path`
 * names the value where it was given (`onBusy.wait.timeoutMs`).
 */
export const RULES = {
  /** An integer in PostgreSQL's `integer` range (the priority column). */
  priority: (value: unknown) =>
    typeof value === 'number' && Number.isInteger(value) && value >= INT32_MIN && value <= INT32_MAX
      ? undefined
      : messages.priorityArgument(value),
  /** A non-negative integer that fits the lease row's `integer` column. */
  holdAtLeastMs: (value: unknown) =>
    typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= INT32_MAX
      ? undefined
      : messages.holdArgument(value),
  /**
   * A call's own lease length: a positive integer that fits the row's `integer` column (and a timer). Whether the
   * module's heartbeat can keep it is checked against its timing where the call meets the engine (lease-timeout.ts).
   */
  leaseTimeoutMs: (value: unknown) =>
    typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= INT32_MAX
      ? undefined
      : messages.leaseTimeoutArgument(value),
  /** How many may hold a key at once (semaphores): an integer from 1 to MAX_SLOT_LIMIT. */
  limit: (value: unknown) =>
    typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= MAX_SLOT_LIMIT
      ? undefined
      : messages.limitArgument(value, MAX_SLOT_LIMIT),
  /** A read-write lease's mode (docs/read-write.md). */
  mode: (value: unknown) => (value === 'shared' || value === 'exclusive' ? undefined : messages.modeArgument(value)),
  /** A wait, a join's bound, a grace: a non-negative integer that a timer can wait (about 24.8 days at most). */
  duration: (value: unknown, path: string) =>
    typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= INT32_MAX
      ? undefined
      : messages.durationArgument(path, value),
} satisfies Record<string, (value: unknown, path: string) => string | undefined>;

/** A rule of a call's values. */
export type CallRule = keyof typeof RULES;

/** Per call: the value is valid, or a `LeaseArgumentError`. */
export function checkCall(rule: CallRule, value: unknown, path: string = rule): void {
  const message = RULES[rule](value, path);
  if (message !== undefined) throw new LeaseArgumentError(message);
}

/** Checks a priority: an integer in PostgreSQL's `integer` range. */
export function assertPriority(priority: unknown): asserts priority is number {
  checkCall('priority', priority);
}

/** The template a call's spans and metrics name it by (`TryAcquireOptions.keyTemplate`). */
export const NO_KEY_TEMPLATE = '(none)';

/** Checks keyTemplate: a non-empty string of at most 255 characters (a label, not a key). */
export function keyTemplateOf(keyTemplate: unknown): string {
  if (keyTemplate === undefined) return NO_KEY_TEMPLATE;
  if (typeof keyTemplate !== 'string' || keyTemplate.length === 0 || keyTemplate.length > 255) {
    const got = typeof keyTemplate === 'string' ? `a string of ${keyTemplate.length} characters` : typeof keyTemplate;
    throw new LeaseArgumentError(messages.keyTemplateInvalid(keyTemplate === null ? 'null' : got));
  }
  return keyTemplate;
}

/** One call's input, checked once where it enters the engine; everything below trusts it. */
export interface LeaseRequest {
  readonly targetKey: string;
  readonly priority: number;
  readonly holdMs: number;
  /** What the key is an instance of: traces (and metrics) name the call by it, never by the key. */
  readonly keyTemplate: string;
  /**
   * How many may hold the key at once: 1 is the single-holder path, more a semaphore (see engine/acquisition-route.ts);
   * `SHARED_LIMIT` (0) and `EXCLUSIVE_LIMIT` (-1) a read-write lease's modes (see options/slot-limits.ts).
   */
  readonly limit: number;
  /** The call's own lease length (see options/lease-timeout.ts); absent: the module's `timing.leaseTimeoutMs`. */
  readonly leaseTimeoutMs?: number;
}

/** The one check of a call's key, priority, hold, template and lease length (`LeaseKeyError` / `LeaseArgumentError`). */
export function callRequest(
  targetKey: unknown,
  options: {
    priority?: number;
    holdAtLeastMs?: number;
    keyTemplate?: string;
    limit?: number;
    leaseTimeoutMs?: number;
    mode?: unknown;
  },
): LeaseRequest {
  if (options.priority !== undefined) assertPriority(options.priority);
  if (options.holdAtLeastMs !== undefined) checkCall('holdAtLeastMs', options.holdAtLeastMs);
  if (options.limit !== undefined) checkCall('limit', options.limit);
  if (options.leaseTimeoutMs !== undefined) checkCall('leaseTimeoutMs', options.leaseTimeoutMs);
  const keyTemplate = keyTemplateOf(options.keyTemplate);
  const { priority = 0, holdAtLeastMs = 0, leaseTimeoutMs } = options;
  const limit = limitOf(options, (message) => {
    throw new LeaseArgumentError(message);
  });
  return requestOf(targetKey, priority, holdAtLeastMs, keyTemplate, limit, leaseTimeoutMs);
}

/**
 * The request's limit: a read-write mode's (`SHARED_LIMIT`, `EXCLUSIVE_LIMIT`), refused beside `limit` or
 * `holdAtLeastMs`; else the call's limit (1 by default). `refuse` throws the door's error.
 */
export function limitOf(
  options: { limit?: unknown; holdAtLeastMs?: unknown; mode?: unknown },
  refuse: (message: string) => never,
): number {
  if (options.mode === undefined) return (options.limit as number | undefined) ?? 1;
  const message = RULES.mode(options.mode);
  if (message !== undefined) refuse(message);
  if (options.limit !== undefined) refuse(messages.modeWith('limit'));
  if (options.holdAtLeastMs !== undefined) refuse(messages.modeWith('holdAtLeastMs'));
  return options.mode === 'shared' ? SHARED_LIMIT : EXCLUSIVE_LIMIT;
}

/** A request of values already checked (a declaration's): the key alone is checked, per call. */
export function requestOf(
  targetKey: unknown,
  priority: number,
  holdMs: number,
  keyTemplate: string,
  limit: number,
  leaseTimeoutMs?: number,
): LeaseRequest {
  assertTargetKey(targetKey);
  const request = { targetKey, priority, holdMs, keyTemplate, limit };
  return leaseTimeoutMs === undefined ? request : { ...request, leaseTimeoutMs };
}
