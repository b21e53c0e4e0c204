/**
 * Every rule for a call's input — the key, priority, holdAtLeastMs, waitTimeoutMs, onBusy —, checked where it enters:
 * at decoration time (`exclusiveMetadata`, `LeaseConfigError`) and per call (the assert* functions, argument errors).
 */
import { LeaseArgumentError, LeaseConfigError, LeaseKeyError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { AcquireOptions } from '../interfaces/acquire-options.interface.js';
import type { ExclusiveKey, ExclusiveMetadata, ExclusiveOptions } from '../interfaces/exclusive-options.interface.js';
import { INT32_MAX, INT32_MIN } from './limits.js';

import { MAX_TARGET_KEY_BYTES } from '../lease.constants.js';

/** A UTF-16 surrogate without its other half: not encodable as UTF-8. */
export const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Checks a target key before any SQL runs: a well-formed string of 1–255 bytes of UTF-8 without NUL. */
export function assertTargetKey(targetKey: unknown): asserts targetKey is string {
  if (typeof targetKey !== 'string') {
    throw new LeaseKeyError(`A target key must be a string, got ${targetKey === null ? 'null' : typeof targetKey}`);
  }
  if (targetKey.length === 0) {
    throw new LeaseKeyError('A target key must not be empty: name the work, e.g. "report:user:42"');
  }
  if (targetKey.includes('\0')) {
    throw new LeaseKeyError('A target key must not contain NUL characters', targetKey.replace(/\0/g, '\\0'));
  }
  // Encoded to UTF-8, a lone surrogate becomes U+FFFD: two different keys would share one row, and the NOTIFY of a
  // release would name a key no waiter is waiting for.
  if (LONE_SURROGATE.test(targetKey)) {
    throw new LeaseKeyError(
      'A target key must be well-formed UTF-16 (it contains a lone surrogate, half of an emoji or similar): ' +
        'build keys from whole characters',
      targetKey.replace(new RegExp(LONE_SURROGATE, 'g'), '\uFFFD'),
    );
  }
  const bytes = Buffer.byteLength(targetKey, 'utf8');
  if (bytes > MAX_TARGET_KEY_BYTES) {
    throw new LeaseKeyError(
      `A target key must be at most ${MAX_TARGET_KEY_BYTES} bytes of UTF-8, got ${bytes}: ` +
        'hash long identifiers into the key',
      `${targetKey.slice(0, 40)}…`,
    );
  }
}

/** Checks a priority: an integer in PostgreSQL's `integer` range. */
export function assertPriority(priority: unknown): asserts priority is number {
  if (typeof priority !== 'number' || !Number.isInteger(priority) || priority < INT32_MIN || priority > INT32_MAX) {
    throw new LeaseArgumentError(messages.priorityArgument(priority));
  }
}

/** Checks holdAtLeastMs: a non-negative integer that fits the lease row's `integer` column. */
export function assertHoldAtLeastMs(holdAtLeastMs: unknown): asserts holdAtLeastMs is number | undefined {
  if (holdAtLeastMs === undefined) return;
  const valid = typeof holdAtLeastMs === 'number' && Number.isInteger(holdAtLeastMs);
  if (!valid || holdAtLeastMs < 0 || holdAtLeastMs > INT32_MAX) {
    throw new LeaseArgumentError(messages.holdArgument(holdAtLeastMs));
  }
}

/** Validates the decorator's arguments once, at decoration time. */
export function exclusiveMetadata(
  targetKey: ExclusiveKey,
  priorityOrOptions?: number | ExclusiveOptions,
): ExclusiveMetadata {
  if (typeof targetKey !== 'function' && (typeof targetKey !== 'string' || targetKey.length === 0)) {
    throw new LeaseConfigError('@Exclusive needs a key template such as "report:{id}" or a function returning the key');
  }
  const options: ExclusiveOptions =
    typeof priorityOrOptions === 'number' ? { priority: priorityOrOptions } : { ...(priorityOrOptions ?? {}) };
  if (options.priority !== undefined && !Number.isInteger(options.priority)) {
    throw new LeaseConfigError(`@Exclusive priority must be an integer, got ${String(options.priority)}`);
  }
  if (options.waitTimeoutMs !== undefined && (!Number.isInteger(options.waitTimeoutMs) || options.waitTimeoutMs < 0)) {
    throw new LeaseConfigError(
      `@Exclusive waitTimeoutMs must be a non-negative integer, got ${String(options.waitTimeoutMs)}`,
    );
  }
  assertHoldAtLeastMs(options.holdAtLeastMs);
  if (options.onBusy !== undefined && options.onBusy !== 'throw' && options.onBusy !== 'skip') {
    throw new LeaseConfigError(`@Exclusive onBusy must be 'throw' or 'skip', got ${JSON.stringify(options.onBusy)}`);
  }
  return { targetKey, ...options };
}

export function acquireOptionsOf(metadata: ExclusiveMetadata): AcquireOptions {
  const options: AcquireOptions = {};
  if (metadata.priority !== undefined) options.priority = metadata.priority;
  if (metadata.waitTimeoutMs !== undefined) options.waitTimeoutMs = metadata.waitTimeoutMs;
  if (metadata.holdAtLeastMs !== undefined) options.holdAtLeastMs = metadata.holdAtLeastMs;
  return options;
}
