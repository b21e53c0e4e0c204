/**
 * The release statements of a key's own row (slot 0; a semaphore's slot has its own, see semaphore.sql.ts): the single
 * one and the set-based one of a batch (soft: the row keeps its fencing token), each handing the target to the head
 * of its line in the same commit (see handoff.sql.ts).
 */
import { byKeys, liveWaiter, ONE_ROW_ESTIMATE, type LeaseObjectNames } from './fragments.js';
import { givenUp, handoffCtes } from './handoff.sql.js';
import { historyOrdered } from './fencing-token.js';

/**
 * The single release statement (its contract: `LeaseStore.release`). $1 target, $2 lease token, $3 head-only NOTIFY
 * channel (NULL: none), $4 asyncReleaseCommits, $5 aging interval ms, $6 how long the row lock may be waited for (a
 * fenced write of the holder's still finishing): past it the statement fails on the server, and the engine retries.
 * The row is locked first, so a grant's token is drawn after every earlier write of the key committed.
 */
export function singleReleaseSql(n: LeaseObjectNames, timeline: string): string {
  return `${singleReleaseCtes(n, timeline)}
        -- With asyncReleaseCommits, only this statement's commit skips the WAL flush (a lost release only delays).
        SELECT EXISTS (SELECT 1 FROM gave_up) AS released, (SELECT count(*) FROM woke) AS woke,
          CASE WHEN $4::boolean THEN set_config('synchronous_commit', 'off', true) END AS async_commit`;
}

/** The CTEs of the single release ($1–$6 as `singleReleaseSql`'s), up to `gave_up` (see `handoffCtes`). */
function singleReleaseCtes(n: LeaseObjectNames, timeline: string): string {
  return `WITH bound AS MATERIALIZED (
          SELECT set_config('lock_timeout', $6::text, true) AS lock_timeout
        ), mine AS MATERIALIZED (
          SELECT ${givenUp('l')} FROM ${n.lease} l
          WHERE l.target_id = $1 AND l.slot = 0 AND l.lease_token = $2::uuid AND EXISTS (SELECT 1 FROM bound)
          FOR NO KEY UPDATE OF l
        ), ${handoffCtes(n, 'mine', { timeline, aging: '$5', channel: '$3' })}`;
}

/**
 * The single release that also queues its caller again (its contract: `LeaseStore.releaseAndPark`): $1–$6 as
 * `singleReleaseSql`'s, $7 the new waiter id, $8 owner, $9 priority, $10 waiter timeout, $11 maxWaitersPerTarget. When
 * the release hands the key to a waiter (and only then: a key left free needs no line), a waiter row of the caller's
 * is inserted at the end of its priority, in the same commit — the re-queue a caller that asks again at once would
 * send as a statement of its own. The place is drawn like an enqueue's (see `enqueueSql`); the line's bound counts
 * the live waiters this statement's snapshot sees, the grantee's row (which the handoff deletes) among them. No place
 * (`parked_seq` NULL): nothing was handed, or the line was full.
 */
export function parkingReleaseSql(n: LeaseObjectNames, timeline: string): string {
  const { waiter, waiterSequence } = n;
  return `${singleReleaseCtes(n, timeline)}, parked AS (
          INSERT INTO ${waiter} AS w (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
          SELECT x.target_id, $7::uuid, $8, $9, $10, clock_timestamp(), ${historyOrdered(waiterSequence, timeline)},
            clock_timestamp()
          FROM handed x
          WHERE (SELECT count(*) FROM ${waiter} c WHERE c.target_id = $1 AND ${liveWaiter('c')}) <= $11
          RETURNING w.seq::text AS seq, w.queued_at
        )
        SELECT EXISTS (SELECT 1 FROM gave_up) AS released, (SELECT count(*) FROM woke) AS woke,
          (SELECT seq FROM parked) AS parked_seq, (SELECT queued_at FROM parked) AS parked_at,
          CASE WHEN $4::boolean THEN set_config('synchronous_commit', 'off', true) END AS async_commit`;
}

/**
 * The set-based soft release (rows kept, token cleared, or handed to the head of the line): $1 jsonb array of
 * `{ i, target_id, lease_token }`, $2 the head-only NOTIFY channel (NULL: no NOTIFY), $3 asyncReleaseCommits, $4 aging
 * interval ms (NULL: off). Rows are locked in key order and never waited for: a row locked by another transaction (a
 * fenced write of the holder's, say) is `retry`, and that caller alone goes the single statement, which waits for it.
 */
export function batchReleaseSql(n: LeaseObjectNames, timeline: string): string {
  const { lease } = n;
  return `WITH req AS (
      SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(i int, target_id text, lease_token uuid) ${ONE_ROW_ESTIMATE}
    ), locked AS MATERIALIZED (
      -- A lease token is drawn for one grant and lives on that one row: a row of the keys that carries one of the
      -- tokens carries its own caller's. Arrays, not a join: the plan probes the keys whatever it was made for.
      SELECT ${givenUp('l')}, l.lease_token FROM ${lease} l
      WHERE ${byKeys('l', 'req')} AND l.slot = 0 AND l.lease_token = ANY (ARRAY(SELECT lease_token FROM req))
      ORDER BY l.target_id
      FOR NO KEY UPDATE OF l SKIP LOCKED
    ), ${handoffCtes(n, 'locked', { timeline, aging: '$4', channel: '$2' })}
    SELECT r.i::int AS i,
      CASE WHEN EXISTS (SELECT 1 FROM gave_up g JOIN locked k ON k.target_id = g.target_id
            WHERE g.target_id = r.target_id AND k.lease_token = r.lease_token)
          THEN 'released'
        WHEN EXISTS (SELECT 1 FROM ${lease} l
            WHERE l.target_id = r.target_id AND l.slot = 0 AND l.lease_token = r.lease_token)
          THEN 'retry'
        ELSE 'gone' END AS outcome,
      (SELECT count(*) FROM woke) AS woke,
      CASE WHEN $3::boolean THEN set_config('synchronous_commit', 'off', true) END AS async_commit
    FROM req r ORDER BY r.i`;
}

/**
 * The release of a lease its acquisition found without a line (`loneAcquireSql`): $1 target, $2 lease token, $3 how
 * long the row lock may be waited for, $4 asyncReleaseCommits. Clears the token (the row kept) when the target still
 * has no waiter row; with one, it writes nothing and answers `line`, and the caller sends the single statement, which
 * hands the target to the head of the line (the waiter rows it reads are those of the same snapshot either way).
 */
export function loneReleaseSql(n: LeaseObjectNames): string {
  return `WITH bound AS MATERIALIZED (
          SELECT set_config('lock_timeout', $3::text, true) AS lock_timeout
        ), line AS MATERIALIZED (
          SELECT EXISTS (SELECT 1 FROM ${n.waiter} w WHERE w.target_id = $1) AS waiting
        ), freed AS (
          UPDATE ${n.lease} AS l SET lease_token = NULL FROM line
          WHERE l.target_id = $1 AND l.slot = 0 AND l.lease_token = $2::uuid AND NOT line.waiting
            AND EXISTS (SELECT 1 FROM bound)
          RETURNING 1
        )
        SELECT EXISTS (SELECT 1 FROM freed) AS released, line.waiting AS line,
          CASE WHEN $4::boolean THEN set_config('synchronous_commit', 'off', true) END AS async_commit
        FROM line`;
}
