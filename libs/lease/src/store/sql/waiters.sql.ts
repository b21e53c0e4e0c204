/** The waiter statements: enqueue, the waiter heartbeat, dequeue, and the removal of every waiter at shutdown. */
import { notifyHeadSql } from '../../database/head-payload.js';
import { bornWithin, headOf, liveWaiter, MS, taken, type LeaseObjectNames } from './fragments.js';
import { givenUp, handoffCtes } from './handoff.sql.js';
import { historyOrdered } from './fencing-token.js';

/**
 * The enqueue statement (its contract: `WaiterStore.enqueue`). $1 target, $2 waiter id, $3 owner, $4 priority, $5 waiter
 * timeout, $6 queued_at and $7 seq of an old place (re-queue), $8 maxWaitersPerTarget, $9 the statement's bound. The
 * place in line orders across failovers like a fencing token (see historyOrdered): a waiter queued after a failover
 * never passes one queued before it that re-queues at its old place.
 */
export function enqueueSql(n: LeaseObjectNames, timeline: string): string {
  const { waiter, waiterSequence } = n;
  return `INSERT INTO ${waiter} AS w (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
        SELECT $1, $2::uuid, $3, $4, $5, coalesce($6::timestamptz, clock_timestamp()),
          coalesce($7::bigint, ${historyOrdered(waiterSequence, timeline)}), ${bornWithin('$5', '$9')}
        WHERE (SELECT count(*) FROM ${waiter} c WHERE c.target_id = $1 AND ${liveWaiter('c')}) < $8
        ON CONFLICT (target_id, waiter_id) DO UPDATE SET heartbeat_at = greatest(w.heartbeat_at, excluded.heartbeat_at)
        RETURNING w.seq::text AS seq, w.queued_at`;
}

/**
 * The waiter heartbeat (its contract: `WaiterStore.renew`): $1 targets, $2 this process's waiter ids, $3 head-only
 * channel, $4 aging. Besides the renewal and the removal of dead waiters, it names (head-only NOTIFY) each of this
 * process's waiters that heads the line of a key left free: a release whose snapshot was taken before that waiter's
 * row committed frees the key and names nobody, and the waiter — queued behind one granted and done meanwhile —
 * sleeps until a NOTIFY names it. Found here, it looks again within a waiter heartbeat, not at its poll.
 */
export function renewWaitersSql(n: LeaseObjectNames): string {
  const { lease, waiter } = n;
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
          SELECT ${notifyHeadSql('$3', 'h.waiter_id', 'h.target_id')}
          FROM (SELECT t.target_id, ${headOf(n, 't.target_id', '$4')} AS waiter_id
            FROM (SELECT DISTINCT target_id FROM dead) t) h
          WHERE $3::text IS NOT NULL AND h.waiter_id IS NOT NULL
        ), renewed AS (
          UPDATE ${waiter} AS w SET heartbeat_at = clock_timestamp()
          FROM mine WHERE w.target_id = mine.target_id AND w.waiter_id = mine.waiter_id
          RETURNING w.waiter_id::text AS waiter_id
        ), stranded AS (
          -- This process's head of a line whose key no row takes (no holder, no grant, no hold's tail): the head is
          -- looked up once per such key, none for a key that is taken.
          SELECT ${notifyHeadSql('$3', 'h.waiter_id', 'h.target_id')}
          FROM (SELECT f.target_id, ${headOf(n, 'f.target_id', '$4')} AS waiter_id
            FROM (SELECT DISTINCT m.target_id FROM mine m
              WHERE NOT EXISTS (SELECT 1 FROM ${lease} l WHERE l.target_id = m.target_id AND ${taken('l')})) f) h
          WHERE $3::text IS NOT NULL AND h.waiter_id IN (SELECT waiter_id FROM mine)
        )
        -- UNION ALL makes PostgreSQL evaluate the NOTIFY branches whatever the renewal returns.
        SELECT waiter_id FROM renewed UNION ALL SELECT NULL FROM woke UNION ALL SELECT NULL FROM stranded`;
}

/**
 * A waiter leaves (its contract: `WaiterStore.dequeue`): $1 target, $2 waiter id, $3 head-only channel, $4 aging. A
 * grant a handoff gave it meanwhile, never confirmed, goes on to the next in line in the same statement (the lease row
 * is locked before the waiter row, as everywhere).
 */
export function dequeueSql(n: LeaseObjectNames, timeline: string): string {
  const { lease, waiter } = n;
  return `WITH mine AS MATERIALIZED (
          SELECT ${givenUp('l')} FROM ${lease} l WHERE l.target_id = $1 AND l.slot = 0 AND l.lease_token = $2::uuid
          FOR NO KEY UPDATE OF l
        ), gone AS (
          DELETE FROM ${waiter} WHERE target_id = $1 AND waiter_id = $2::uuid AND (SELECT count(*) FROM mine) >= 0
          RETURNING target_id
        ), ${handoffCtes(n, 'mine', { timeline, aging: '$4', channel: '$3', except: 'w.waiter_id = $2::uuid' })}
        -- Head-only: the new head of the line (not the leaving waiter, whose row this statement still sees) of a
        -- target left free.
        SELECT (SELECT count(*) FROM (SELECT ${notifyHeadSql('$3', 'h.waiter_id', 'h.target_id')}
          FROM (SELECT gone.target_id, ${headOf(n, 'gone.target_id', '$4', '$2::uuid')} AS waiter_id FROM gone
            WHERE NOT EXISTS (SELECT 1 FROM ${lease} l
              WHERE l.target_id = gone.target_id AND l.slot = 0 AND ${taken('l')})) h
          WHERE $3::text IS NOT NULL AND h.waiter_id IS NOT NULL) x) + (SELECT count(*) FROM woke) AS woke,
          -- Neither its row nor a grant was here: a release took the row with a grant this statement's snapshot
          -- could not see (it committed while this one waited for the row), and the caller passes it on.
          NOT EXISTS (SELECT 1 FROM gone) AND NOT EXISTS (SELECT 1 FROM mine) AS row_taken`;
}

/**
 * Removes the given waiters (shutdown): $1 their targets, $2 their ids, $3 head-only channel, $4 aging. Grants they
 * were given and never confirmed go on to the next in line, as in `dequeueSql`. Rows: the waiters whose row a grant
 * took meanwhile (`target_id`, `waiter_id`; see `dequeueAllTaken`).
 */
export function dequeueAllSql(n: LeaseObjectNames, timeline: string): string {
  const { lease, waiter } = n;
  return `WITH leaving AS (
          SELECT * FROM unnest($1::text[], $2::uuid[]) AS m(target_id, waiter_id)
        ), mine AS MATERIALIZED (
          SELECT ${givenUp('l')}, l.lease_token FROM ${lease} l
          JOIN leaving m ON l.target_id = m.target_id AND l.slot = 0 AND l.lease_token = m.waiter_id
          ORDER BY l.target_id
          FOR NO KEY UPDATE OF l
        ), gone AS (
          DELETE FROM ${waiter} w USING leaving m
          WHERE w.target_id = m.target_id AND w.waiter_id = m.waiter_id AND (SELECT count(*) FROM mine) >= 0
          RETURNING w.waiter_id
        ), ${handoffCtes(n, 'mine', {
          timeline,
          aging: '$4',
          channel: '$3',
          except: 'w.waiter_id = ANY($2::uuid[])',
        })}
        -- One row per waiter whose row a release took with a grant this snapshot cannot see (the caller passes those
        -- on), or one row of nulls; counting the wake-ups makes PostgreSQL send every one of them.
        SELECT w.woke, m.target_id, m.waiter_id::text AS waiter_id
        FROM (SELECT count(*) AS woke FROM woke) w
        LEFT JOIN leaving m ON NOT EXISTS (SELECT 1 FROM gone g WHERE g.waiter_id = m.waiter_id)
          AND NOT EXISTS (SELECT 1 FROM mine k WHERE k.lease_token = m.waiter_id)`;
}
