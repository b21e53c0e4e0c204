/** `LeaseService.list()`'s rows: the snapshot statement's rows as `LeaseSnapshot`s, with waiters' positions. */
import type { LeaseSnapshot } from '../interfaces/lease-event.interface.js';
import type { SnapshotRow } from '../core/backend.js';
import { modeOfLimit, slotOfRow } from '../options/slot-limits.js';

/** `rows` in grant order per target (as the statement returns them); `owner`: this process's, for `mine`. */
export function snapshotsOf(rows: readonly SnapshotRow[], owner: string): LeaseSnapshot[] {
  const positions = new Map<string, number>();
  return rows.map((row) => {
    const live = row.since_heartbeat_ms < row.timeout_ms;
    // A semaphore's slot is a row of its key (see options/slot-limits.ts); so is a read-write lease's row.
    const mode = modeOfLimit(row.slot_limit);
    const slot = row.slot === null || mode ? undefined : slotOfRow(row.slot);
    const snapshot: LeaseSnapshot = {
      targetKey: row.target_id,
      state: row.state,
      owner: row.owner,
      mine: row.owner === owner,
      priority: row.priority,
      effectivePriority: Number(row.effective_priority),
      ageMs: Math.round(row.age_ms),
      sinceHeartbeatMs: Math.round(row.since_heartbeat_ms),
      timeoutMs: row.timeout_ms,
      live,
    };
    if (row.fencing_token !== null) snapshot.fencingToken = BigInt(row.fencing_token);
    if (slot !== undefined) snapshot.slot = slot;
    if (mode !== undefined) snapshot.mode = mode;
    // JSON-safe as returned (a controller may answer `list()` as is): the fencing token serializes as a string.
    Object.defineProperty(snapshot, 'toJSON', { value: snapshotJson, enumerable: false });
    if (row.state === 'waiting' && live) {
      const position = (positions.get(row.target_id) ?? 0) + 1;
      positions.set(row.target_id, position);
      snapshot.position = position;
    }
    return snapshot;
  });
}

/** `JSON.stringify` of a snapshot: the same fields, the fencing token (a bigint) as a decimal string. */
function snapshotJson(this: LeaseSnapshot): Record<string, unknown> {
  const { fencingToken, ...rest } = this;
  return fencingToken === undefined ? rest : { ...rest, fencingToken: String(fencingToken) };
}
