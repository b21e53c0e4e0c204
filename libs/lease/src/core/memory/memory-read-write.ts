/**
 * The memory backend's read-write grants (docs/read-write.md): the rules of `sharedAcquireSql` and
 * `exclusiveAcquireSql` over a key's rows. A reader is granted while no writer holds (nor a hold's tail) and no live
 * waiter is ahead, a writer while nobody holds and no live waiter is ahead; another kind of holder (a single holder,
 * a semaphore) is a conflict. Pure: the backend applies the grant.
 */
import { MAX_READERS, OWN_ROW_SLOT, SHARED_LIMIT, WRITER_ROW_SLOT } from '../../options/slot-limits.js';

/** What the rules read of a row. */
export interface ReadWriteRow {
  readonly limit: number;
}

/** The row slot to grant, or a refusal (`heldLimit`: another kind of holder, see `SlotRefusal`). */
export type ReadWritePick = { readonly slot: number } | { readonly heldLimit: number | null };

/**
 * The pick for a call of `limit` (`SHARED_LIMIT` or `EXCLUSIVE_LIMIT`) on a key's `rows` (by row slot); `live` and
 * `taken` (live or in its hold's tail) as the backend judges them; `ahead`: live waiters ahead of the caller.
 */
export function pickReadWrite<R extends ReadWriteRow>(
  rows: ReadonlyMap<number, R> | undefined,
  limit: number,
  rules: { live: (row: R) => boolean; taken: (row: R) => boolean; ahead: number },
): ReadWritePick {
  const all = [...(rows ?? new Map<number, R>())];
  const own = rows?.get(OWN_ROW_SLOT);
  if (own && rules.live(own)) return { heldLimit: 1 };
  const semaphore = all.find(([slot, row]) => slot > OWN_ROW_SLOT && row.limit > 0 && rules.taken(row));
  if (semaphore) return { heldLimit: semaphore[1].limit };
  const writer = rows?.get(WRITER_ROW_SLOT);
  const readers = all.filter(([slot, row]) => slot > WRITER_ROW_SLOT && rules.taken(row)).length;
  if (rules.ahead > 0 || (writer && rules.taken(writer))) return { heldLimit: null };
  if (limit !== SHARED_LIMIT) return readers > 0 ? { heldLimit: null } : { slot: WRITER_ROW_SLOT };
  if (readers >= MAX_READERS) return { heldLimit: null };
  for (let slot = WRITER_ROW_SLOT + 1; ; slot++) {
    const row = rows?.get(slot);
    if (!row || !rules.taken(row)) return { slot };
  }
}
