import { LeaseArgumentError, LeaseKeyError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import { INT32_MAX, INT32_MIN } from './limits.js';

export const MAX_TARGET_KEY_BYTES = 255;

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

const PLACEHOLDER = /\{([^{}]+)\}/g;

/**
 * Fills a key template such as `'report:{id}'`. `lookup` returns the value of a placeholder or undefined; a
 * placeholder that resolves to nothing (undefined, null, empty string, object) is a `LeaseKeyError`, never a lease on
 * "report:undefined".
 */
export function fillKeyTemplate(template: string, lookup: (name: string) => unknown): string {
  const key = template.replace(PLACEHOLDER, (_, rawName: string) => {
    const name = rawName.trim();
    const value = lookup(name);
    if (
      value === undefined ||
      value === null ||
      value === '' ||
      (typeof value === 'object' && !(value instanceof Date))
    ) {
      throw new LeaseKeyError(`Key template "${template}": placeholder {${name}} resolved to nothing`);
    }
    if (value instanceof Date) return value.toISOString();
    // eslint-disable-next-line @typescript-eslint/no-base-to-string -- objects other than a Date were refused above
    return String(value);
  });
  assertTargetKey(key);
  return key;
}
