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

/**
 * Read-write leases (docs/read-write.md) are rows of their key with a limit of their own: a reader's row records 0
 * (no fixed limit), the writer's row -1, in the `slot_limit` column and as the request's `limit`. The writer's row is
 * row slot 1 (`WRITER_ROW_SLOT`); readers' rows are row slots 2 … MAX_READERS + 1.
 */
export const SHARED_LIMIT = 0;
export const EXCLUSIVE_LIMIT = -1;
export const WRITER_ROW_SLOT = 1;
/** How many may hold a key in shared mode at once (a bound, as `MAX_SLOT_LIMIT` is a semaphore's). */
export const MAX_READERS = 1000;

/** The mode of a read-write call or row of `limit`; undefined for a single holder's or a semaphore's. */
export function modeOfLimit(limit: number | null | undefined): 'shared' | 'exclusive' | undefined {
  return limit === SHARED_LIMIT ? 'shared' : limit === EXCLUSIVE_LIMIT ? 'exclusive' : undefined;
}

/** A lease row: `(target_id, slot)`, the slot 0 (a key's own row) or `i + 1` (slot `i` of a semaphore). */
export interface RowRef {
  readonly targetKey: string;
  readonly slot: number;
  /** A semaphore's slot row (`limit` above 1; not a read-write lease's): its release may go in a batch. */
  readonly semaphore?: boolean;
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
