/** The waiter statements: enqueue, the waiter heartbeat, dequeue, and the removal of every waiter at shutdown. */
import { bornWithin, headOf, liveWaiter, MS, taken, type LeaseObjectNames } from './fragments.js';
import { historyOrdered } from './fencing-token.js';

/**
 * The enqueue statement (its contract: `LeaseStore.enqueue`). $1 target, $2 waiter id, $3 owner, $4 priority, $5 waiter
 * timeout, $6 queued_at and $7 seq of an old place (re-queue), $8 maxWaitersPerTarget, $9 the statement's bound. The
 * place in line orders across failovers like a fencing token (see historyOrdered): a waiter queued after a failover
 * never passes one queued before it that re-queues at its old place.
 */
export function enqueueSql(n: LeaseObjectNames): string {
  const { waiter, waiterSequence } = n;
  return `INSERT INTO ${waiter} AS w (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
        SELECT $1, $2::uuid, $3, $4, $5, coalesce($6::timestamptz, clock_timestamp()),
          coalesce($7::bigint, ${historyOrdered(waiterSequence)}), ${bornWithin('$5', '$9')}
        WHERE (SELECT count(*) FROM ${waiter} c WHERE c.target_id = $1 AND ${liveWaiter('c')}) < $8
        ON CONFLICT (target_id, waiter_id) DO UPDATE SET heartbeat_at = greatest(w.heartbeat_at, excluded.heartbeat_at)
        RETURNING w.seq::text AS seq, w.queued_at`;
}

/** The enqueue, renew-waiters, dequeue, dequeue-all and snapshot texts (see their methods). */
export function renewWaitersSql(n: LeaseObjectNames): string {
  const { waiter } = n;
  return `WITH mine AS (
          SELECT * FROM unnest($1::text[], $2::uuid[]) AS m(target_id, waiter_id)
        ), dead AS (
          DELETE FROM ${waiter} w
          WHERE w.target_id IN (SELECT target_id FROM mine)
            AND w.heartbeat_at + w.timeout_ms ${MS} <= clock_timestamp()
            AND w.waiter_id NOT IN (SELECT waiter_id FROM mine)
          RETURNING w.target_id
        ), woke AS (
          -- Head-only: the line of these targets moved; only its new head (if live) need look.
          SELECT pg_notify($3, h.waiter_id::text || ' ' || h.target_id)
          FROM (SELECT t.target_id, ${headOf(n, 't.target_id', '$4')} AS waiter_id
            FROM (SELECT DISTINCT target_id FROM dead) t) h
          WHERE $3::text IS NOT NULL AND h.waiter_id IS NOT NULL
        ), renewed AS (
          UPDATE ${waiter} AS w SET heartbeat_at = clock_timestamp()
          FROM mine WHERE w.target_id = mine.target_id AND w.waiter_id = mine.waiter_id
          RETURNING w.waiter_id::text AS waiter_id
        )
        -- UNION ALL makes PostgreSQL evaluate the NOTIFY branch whatever the renewal returns.
        SELECT waiter_id FROM renewed UNION ALL SELECT NULL FROM woke`;
}

export function dequeueSql(n: LeaseObjectNames): string {
  const { lease, waiter } = n;
  return `WITH gone AS (
          DELETE FROM ${waiter} WHERE target_id = $1 AND waiter_id = $2::uuid RETURNING target_id
        )
        -- Head-only: the new head of the line (not the leaving waiter, whose row this statement still sees).
        SELECT pg_notify($3, h.waiter_id::text || ' ' || h.target_id)
        FROM (SELECT gone.target_id, ${headOf(n, 'gone.target_id', '$4', '$2::uuid')} AS waiter_id FROM gone
          WHERE NOT EXISTS (SELECT 1 FROM ${lease} l WHERE l.target_id = gone.target_id AND ${taken('l')})) h
        WHERE $3::text IS NOT NULL AND h.waiter_id IS NOT NULL`;
}

/** Removes all the given waiter rows (shutdown): $1 their ids. */
export function dequeueAllSql(n: LeaseObjectNames): string {
  return `DELETE FROM ${n.waiter} WHERE waiter_id = ANY($1::uuid[])`;
}
