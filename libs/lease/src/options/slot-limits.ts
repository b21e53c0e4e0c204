/**
 * How a semaphore's slots are named (`limit` above 1, README "Semaphores: N holders per key"): slot `i` of key `k` is
 * the lease row `k\u001fi`, and `k\u001f` records the key's limit. No key may contain U+001F (`assertTargetKey`), so
 * these names never meet a key's own row. Pure.
 */
import { MAX_TARGET_KEY_BYTES } from '../lease.constants.js';

/** The separator of a slot row's name: U+001F (unit separator), refused in keys. */
export const SLOT_SEPARATOR = '\u001f';

/** The largest `limit` a call may ask. */
export const MAX_SLOT_LIMIT = 1000;

/** A limited key leaves room in the row's 255 bytes for its largest slot suffix (`\u001f999`). */
export const MAX_LIMITED_KEY_BYTES = MAX_TARGET_KEY_BYTES - 1 - String(MAX_SLOT_LIMIT - 1).length;

/** The lease row of slot `slot` of `targetKey`. */
export function slotRowKey(targetKey: string, slot: number): string {
  return `${targetKey}${SLOT_SEPARATOR}${slot}`;
}

/** A row name split back into its key and slot (undefined: a key's own row, or the row recording the limit). */
export function slotOfRow(rowKey: string): { targetKey: string; slot: number } | undefined {
  const at = rowKey.lastIndexOf(SLOT_SEPARATOR);
  if (at < 0 || at === rowKey.length - 1) return undefined;
  return { targetKey: rowKey.slice(0, at), slot: Number(rowKey.slice(at + 1)) };
}
