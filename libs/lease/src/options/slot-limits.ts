/**
 * How a semaphore's slots are numbered (`limit` above 1, docs/semaphores.md). A lease row is
 * `(target_id, slot)`: slot 0 is a key's own row (its single holder), and slot `i` of a limited call (`Lease.slot`,
 * 0 … limit − 1) is the row `(key, i + 1)` — a column of its own, so any key (U+001F included) has every slot. The
 * purge's high-water row has the one negative slot (see store/sql/token-floor.sql.ts). Pure.
 */

/** The largest `limit` a call may ask. */
export const MAX_SLOT_LIMIT = 1000;

/** The row slot of a key's own row: a single holder's. */
export const OWN_ROW_SLOT = 0;

/** A lease row: `(target_id, slot)`, the slot 0 (a key's own row) or `i + 1` (slot `i` of a semaphore). */
export interface RowRef {
  readonly targetKey: string;
  readonly slot: number;
}

/** A key's own row (its single holder's). */
export function ownRow(targetKey: string): RowRef {
  return { targetKey, slot: OWN_ROW_SLOT };
}

/** The row slot of semaphore slot `slot` (0 … limit − 1). */
export function rowSlotOf(slot: number): number {
  return slot + 1;
}

/** The semaphore slot (`Lease.slot`) of row slot `rowSlot`; undefined for a key's own row. */
export function slotOfRow(rowSlot: number): number | undefined {
  return rowSlot > OWN_ROW_SLOT ? rowSlot - 1 : undefined;
}
