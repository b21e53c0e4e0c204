/**
 * Every rule for a call's input — the key, priority, holdAtLeastMs, waitTimeoutMs, onBusy —, checked where it enters:
 * at decoration time (`exclusiveMetadata`, `LeaseConfigError`) and per call (the assert* functions, argument errors).
 */
import { LeaseArgumentError, LeaseConfigError, LeaseKeyError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { RunOptions } from '../interfaces/acquire-options.interface.js';
import type { ExclusiveKey, ExclusiveMetadata, ExclusiveOptions } from '../interfaces/exclusive-options.interface.js';
import { INT32_MAX, INT32_MIN } from './limits.js';

import { MAX_TARGET_KEY_BYTES } from '../lease.constants.js';
import { MAX_SLOT_LIMIT } from './slot-limits.js';

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
 * The rules of a call's options, one table for both entry points: at decoration or bootstrap (`checkDeclared`,
 * `LeaseConfigError`) and per call (`checkCall`, `LeaseArgumentError`). Each gives the message of a value that
 * breaks it, or undefined.
 */
const RULES = {
  /** An integer in PostgreSQL's `integer` range (the priority column). */
  priority: (value: unknown) =>
    typeof value === 'number' && Number.isInteger(value) && value >= INT32_MIN && value <= INT32_MAX
      ? undefined
      : messages.priorityArgument(value),
  /** A non-negative integer that a timer can wait (about 24.8 days at most). */
  waitTimeoutMs: (value: unknown) =>
    typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= INT32_MAX
      ? undefined
      : messages.waitTimeoutArgument(value),
  /** A non-negative integer that fits the lease row's `integer` column. */
  holdAtLeastMs: (value: unknown) =>
    typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= INT32_MAX
      ? undefined
      : messages.holdArgument(value),
  /** How many may hold a key at once (semaphores): an integer from 1 to MAX_SLOT_LIMIT. */
  limit: (value: unknown) =>
    typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= MAX_SLOT_LIMIT
      ? undefined
      : messages.limitArgument(value, MAX_SLOT_LIMIT),
  /** Like waitTimeoutMs: a bound a timer can wait. */
  joinTimeoutMs: (value: unknown) =>
    typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= INT32_MAX
      ? undefined
      : messages.joinTimeoutArgument(value),
  /** Whether the call takes the target over from a holder of lower priority. */
  preempt: (value: unknown) => (typeof value === 'boolean' ? undefined : messages.preemptArgument(value)),
  /** Like waitTimeoutMs: a bound a timer can wait. */
  preemptGraceMs: (value: unknown) =>
    typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= INT32_MAX
      ? undefined
      : messages.preemptGraceArgument(value),
} satisfies Record<string, (value: unknown) => string | undefined>;

/** An option a call (or a declaration) gives. */
export type CallInput = keyof typeof RULES;

/** Per call: the option is valid, or a `LeaseArgumentError`. */
export function checkCall(name: CallInput, value: unknown): void {
  const message = RULES[name](value);
  if (message !== undefined) throw new LeaseArgumentError(message);
}

/** At decoration (or bootstrap): the option is valid, or a `LeaseConfigError` naming `@Exclusive`. */
export function checkDeclared(name: CallInput, value: unknown): void {
  const message = RULES[name](value);
  if (message !== undefined) throw new LeaseConfigError(messages.declared(message));
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

/** Checks holdAtLeastMs: a non-negative integer that fits the lease row's `integer` column. */
export function assertHoldAtLeastMs(holdAtLeastMs: unknown): asserts holdAtLeastMs is number | undefined {
  if (holdAtLeastMs !== undefined) checkCall('holdAtLeastMs', holdAtLeastMs);
}

/** Validates the decorator's arguments once, at decoration time. */
export function exclusiveMetadata(
  targetKey: ExclusiveKey,
  priorityOrOptions?: number | ExclusiveOptions,
): ExclusiveMetadata {
  if (typeof targetKey !== 'function' && (typeof targetKey !== 'string' || targetKey.length === 0)) {
    throw new LeaseConfigError(messages.exclusiveKeyMissing());
  }
  const options: ExclusiveOptions =
    typeof priorityOrOptions === 'number' ? { priority: priorityOrOptions } : { ...(priorityOrOptions ?? {}) };
  // The same rules as per call (checkCall), as configuration errors: a declaration's values never change.
  for (const name of [
    'priority',
    'waitTimeoutMs',
    'holdAtLeastMs',
    'joinTimeoutMs',
    'limit',
    'preempt',
    'preemptGraceMs',
  ] as const) {
    if (options[name] !== undefined) checkDeclared(name, options[name]);
  }
  if (options.preempt && (options.onBusy === 'join' || options.onBusy === 'skip')) {
    throw new LeaseConfigError(messages.declared(messages.preemptWithOnBusy(options.onBusy)));
  }
  if (options.preempt && options.sticky) throw new LeaseConfigError(messages.preemptSticky());
  if (options.onBusy !== undefined && !['throw', 'skip', 'join'].includes(options.onBusy)) {
    throw new LeaseConfigError(messages.exclusiveOnBusyUnknown(JSON.stringify(options.onBusy)));
  }
  if (options.sticky !== undefined && typeof options.sticky !== 'boolean') {
    throw new LeaseConfigError(messages.stickyNotBoolean(typeof options.sticky));
  }
  if (options.sticky && (typeof targetKey !== 'string' || /\{[^}]*\}/.test(targetKey))) {
    throw new LeaseConfigError(messages.stickyNeedsStringKey());
  }
  if (
    options.limit !== undefined &&
    options.limit > 1 &&
    (options.sticky || options.onBusy === 'join' || options.preempt)
  ) {
    const option = options.sticky ? 'sticky' : options.preempt ? 'preempt' : "onBusy: 'join'";
    throw new LeaseConfigError(messages.limitWithSingleHolderOption(option));
  }
  return { targetKey, ...options };
}

export function acquireOptionsOf(metadata: ExclusiveMetadata): RunOptions {
  const options: RunOptions = {};
  if (metadata.priority !== undefined) options.priority = metadata.priority;
  if (metadata.waitTimeoutMs !== undefined) options.waitTimeoutMs = metadata.waitTimeoutMs;
  if (metadata.holdAtLeastMs !== undefined) options.holdAtLeastMs = metadata.holdAtLeastMs;
  if (metadata.joinTimeoutMs !== undefined) options.joinTimeoutMs = metadata.joinTimeoutMs;
  if (metadata.limit !== undefined) options.limit = metadata.limit;
  if (metadata.preempt !== undefined) options.preempt = metadata.preempt;
  if (metadata.preemptGraceMs !== undefined) options.preemptGraceMs = metadata.preemptGraceMs;
  return options;
}

/** One call's input, checked once where it enters the engine; everything below trusts it. */
export interface LeaseRequest {
  readonly targetKey: string;
  readonly priority: number;
  readonly holdMs: number;
  /** What the key is an instance of: traces (and metrics) name the call by it, never by the key. */
  readonly keyTemplate: string;
  /** How many may hold the key at once: 1 is the single-holder path, more a semaphore (see engine/semaphore.ts). */
  readonly limit: number;
}

/** The one check of a call's key, priority, hold and template (`LeaseKeyError` / `LeaseArgumentError`). */
export function callRequest(
  targetKey: unknown,
  options: { priority?: number; holdAtLeastMs?: number; keyTemplate?: string; limit?: number },
): LeaseRequest {
  assertTargetKey(targetKey);
  if (options.priority !== undefined) assertPriority(options.priority);
  assertHoldAtLeastMs(options.holdAtLeastMs);
  const keyTemplate = keyTemplateOf(options.keyTemplate);
  const limit = options.limit ?? 1;
  if (options.limit !== undefined) checkCall('limit', limit);
  return { targetKey, priority: options.priority ?? 0, holdMs: options.holdAtLeastMs ?? 0, keyTemplate, limit };
}

/** A call's wait bound: its own, else the module's default; checked like every call input. */
export function waitTimeoutOf(options: { waitTimeoutMs?: number }, defaultWaitTimeoutMs: number): number {
  const waitTimeoutMs = options.waitTimeoutMs ?? defaultWaitTimeoutMs;
  checkCall('waitTimeoutMs', waitTimeoutMs);
  return waitTimeoutMs;
}

/** A run's onBusy: `'throw'` or `'join'` (`'skip'` is `@Exclusive`'s), else a `LeaseArgumentError`. */
export function checkRunOnBusy(onBusy: unknown): void {
  if (onBusy !== undefined && onBusy !== 'throw' && onBusy !== 'join') {
    throw new LeaseArgumentError(messages.onBusyArgument(onBusy));
  }
}

/** A join's bound: its own joinTimeoutMs, else its waitTimeoutMs, else the module's default; checked. */
export function joinTimeoutOf(options: { joinTimeoutMs?: number; waitTimeoutMs?: number }, defaultMs: number): number {
  const joinTimeoutMs = options.joinTimeoutMs ?? options.waitTimeoutMs ?? defaultMs;
  checkCall(options.joinTimeoutMs !== undefined ? 'joinTimeoutMs' : 'waitTimeoutMs', joinTimeoutMs);
  return joinTimeoutMs;
}

/**
 * A call's preemption (`preempt: true`): its grace — its own preemptGraceMs, else the module's —, or undefined when
 * it does not preempt. Checked like every call input; a preempting run cannot also join.
 */
export function preemptGraceOf(
  options: { preempt?: boolean; preemptGraceMs?: number; onBusy?: string; limit?: number },
  defaultGraceMs: number,
): number | undefined {
  if (options.preempt !== undefined) checkCall('preempt', options.preempt);
  if (options.preemptGraceMs !== undefined) checkCall('preemptGraceMs', options.preemptGraceMs);
  if (!options.preempt) return undefined;
  if (options.onBusy === 'join') throw new LeaseArgumentError(messages.preemptWithOnBusy(options.onBusy));
  // A semaphore's slots have no single holder to preempt.
  if (options.limit !== undefined && options.limit > 1) {
    throw new LeaseArgumentError(messages.limitWithSingleHolderOption('preempt'));
  }
  return options.preemptGraceMs ?? defaultGraceMs;
}
