/** The purge of free rows (see `LeaseStore.purge`). */
import { MS, taken, type LeaseObjectNames } from './fragments.js';
import { raiseHighWaterSql } from './token-floor.sql.js';

/**
 * Lease row `alias` is free (released or expired, past its hold), its token was granted more than $1 ms ago, and it
 * is not the row of the table's largest token ($3, read before; NULL: an empty table): that row stays, so the
 * largest timeline in the tables never goes (see `tableTopsSql`: where the WAL functions are not executable, new
 * tokens carry it). The high-water row (the one negative slot) never goes either.
 */
function purgeable(alias: string): string {
  return `(NOT ${taken(alias)} AND ${alias}.acquired_at < clock_timestamp() - $1::int ${MS}
    AND ${alias}.fencing_token < $3::bigint AND ${alias}.slot >= 0)`;
}

/** The largest token of the lease table (one scan, once per purge run). */
export function largestTokenSql(n: LeaseObjectNames): string {
  return `SELECT max(fencing_token)::text AS token FROM ${n.lease}`;
}

/**
 * Deletes at most $2 purgeable rows (`purgeable`, $1 the purge bound): rows another transaction locks (an acquisition
 * taking the row, a fenced write, another process's purge) are skipped, never waited for; the lock re-reads each row's
 * latest version, and the delete checks it again. A statement that deletes raises the high-water mark to $3 (above
 * every token it deletes), in the same commit: a key's first row is floored at it (see `highWaterToken`), so a purged
 * key is granted above its deleted grants even on a server whose sequence stands below them. The count deleted.
 */
export function purgeSql(n: LeaseObjectNames): string {
  return `WITH doomed AS MATERIALIZED (
      SELECT l.target_id, l.slot FROM ${n.lease} l WHERE ${purgeable('l')}
      LIMIT $2
      FOR UPDATE OF l SKIP LOCKED
    ), gone AS (
      DELETE FROM ${n.lease} l USING doomed d WHERE l.target_id = d.target_id AND l.slot = d.slot AND ${purgeable('l')}
      RETURNING 1
    ), high AS (
      ${raiseHighWaterSql(n.lease, '$3::bigint', 'EXISTS (SELECT 1 FROM gone)')}
    )
    SELECT count(*)::int AS purged FROM gone`;
}
