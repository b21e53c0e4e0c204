/** The snapshot of holders and waiters behind `LeaseService.list()`. */
import { aged, type LeaseObjectNames } from './fragments.js';

/**
 * Holders (live or expired) — a key's own row and its semaphore slots (`slot`: the row's, 0 for the key's own), in
 * slot order, with the limit each was granted under (a read-write lease's mode) — and waiters, each target's waiters in grant order: $1 one key (NULL: all), $2 aging.
 */
export function snapshotSql(n: LeaseObjectNames): string {
  const { lease, waiter } = n;
  const ms = (expression: string) => `(extract(epoch FROM clock_timestamp() - ${expression}) * 1000)::float8`;
  return `SELECT * FROM (
          SELECT 'held' AS state, target_id, slot, slot_limit, owner, priority, priority::bigint AS effective_priority,
            fencing_token::text AS fencing_token, NULL::text AS seq,
            ${ms('acquired_at')} AS age_ms, ${ms('updated_at')} AS since_heartbeat_ms, lease_timeout_ms AS timeout_ms
          FROM ${lease} WHERE lease_token IS NOT NULL AND ($1::text IS NULL OR target_id = $1)
          UNION ALL
          SELECT 'waiting', target_id, NULL, NULL, owner, priority, ${aged('w.queued_at', '$2')}, NULL, seq::text,
            ${ms('queued_at')}, ${ms('heartbeat_at')}, timeout_ms
          FROM ${waiter} w WHERE $1::text IS NULL OR target_id = $1
        ) s
        ORDER BY target_id, state, slot, effective_priority DESC, seq::bigint`;
}
