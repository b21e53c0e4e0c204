/** The acquisition statements: the single one (which may also queue the caller) and the set-based one of a batch. */
import { BATCH_LOCK_WAIT_MS } from '../../options/bounds.js';
import {
  aged,
  byKeys,
  holding,
  live,
  liveWaiter,
  MS,
  ONE_ROW_ESTIMATE,
  runCap,
  taken,
  type LeaseObjectNames,
} from './fragments.js';
import type { StatementFaults } from './statement-faults.js';
import { historyOrdered, historyToken, sequenceLiteral } from './fencing-token.js';
import { highWaterToken } from './token-floor.sql.js';

/**
 * The single acquisition statement (its contract: `LeaseStore.tryAcquire`). Parameters: $1 target, $2 lease token,
 * $3 owner, $4 priority, $5 lease timeout, $6 the caller's waiter id (its lease token then too), $7 its waiter seq,
 * $8 aging interval, $9 hold.
 *
 * With `queue` (the first attempt of a call that will wait in line), a refused caller is queued by the same
 * statement: $10 its new waiter id, $11 waiter timeout, $12 maxWaitersPerTarget. Its place comes back in `seq`,
 * `queued_at` (null when the line is full), and `behind`: a live waiter of the line was ahead of it (its priority at
 * least the caller's), so a release that missed the new row handed the key to that one (see `WaitQueue`). The row is an ordinary one (it lives a waiter timeout from when it is
 * written): the server ends the statement before its caller gives it up (see `tryAcquire`), so the caller hears of
 * every row this statement writes — and gives it back if it no longer waits.
 *
 * One fencing-sequence value per grant: an existing free row (released, or expired: a takeover) is locked first —
 * waiting for a transaction that holds it, within the statement's bound — checked again in its latest version, and
 * its token drawn after the lock; only a key that never had a row draws its token in the INSERT's source row (no
 * earlier grant of it exists). An insert that meets a concurrent first insert of the same key takes that row only if
 * it is free by then, drawing its token after the row lock (two values drawn, in that race alone).
 *
 * `capMs`: past it the statement fails, undone, after its writes (`runCap`), so a purge never races it (see
 * `LeaseStore.purge`); the batch statement carries the same cap.
 */
export function singleAcquireSql(
  n: LeaseObjectNames,
  timeline: string,
  queue: boolean,
  capMs: number,
  faults: StatementFaults,
): string {
  const { lease, waiter, fencingSequence, waiterSequence } = n;
  const nextval = `nextval(${sequenceLiteral(fencingSequence)})`;
  // Off except in the fault schedule's negative control (see statement-faults.ts): every grant then goes through the
  // INSERT, and a conflict keeps the token its source row drew before the row lock.
  const early = faults.tokenBeforeLock;
  const queued = queue
    ? `INSERT INTO ${waiter} (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
          SELECT $1, $10::uuid, $3, $4, $11, clock_timestamp(), ${historyOrdered(waiterSequence, timeline)}, clock_timestamp()
          WHERE NOT EXISTS (SELECT 1 FROM won) AND (SELECT count(*) FROM line WHERE line.live) < $12
          RETURNING seq, queued_at, EXISTS (SELECT 1 FROM line a WHERE a.live AND a.eff >= $4::bigint) AS behind`
    : 'SELECT NULL::bigint AS seq, NULL::timestamptz AS queued_at, NULL::boolean AS behind WHERE false';
  return `WITH held AS (
          -- Any row of the key: its own (slot 0), or a live slot of a semaphore or read-write holder (a plain call on
          -- their key is busy while they hold it, never granted beside them).
          SELECT 1 FROM ${lease} l WHERE l.target_id = $1 AND ${taken('l')}
        ), line AS MATERIALIZED (
          -- The target's line, read once (one index probe) for the rule below and for the clean-up after a grant.
          SELECT w.waiter_id, w.seq, ${aged('w.queued_at', '$8')} AS eff, ${liveWaiter('w')} AS live
          FROM ${waiter} w WHERE w.target_id = $1
        ), me AS (
          -- The caller's effective priority: a queued waiter ages from when it first queued; a newcomer has waited 0.
          SELECT CASE WHEN $6::uuid IS NULL THEN $4::bigint
            ELSE coalesce((SELECT eff FROM line WHERE waiter_id = $6::uuid), $4::bigint) END AS eff
        ), open AS MATERIALIZED (
          -- The read-only pre-check: the target is free and no live waiter is ahead of the caller. A refusal takes no
          -- row lock and writes nothing.
          SELECT EXISTS (SELECT 1 FROM ${lease} l WHERE l.target_id = $1 AND l.slot = 0) AS has_row
          WHERE NOT EXISTS (SELECT 1 FROM held)
            AND NOT EXISTS (SELECT 1 FROM line a, me WHERE a.live AND a.waiter_id IS DISTINCT FROM $6::uuid
              AND (a.eff > me.eff OR (a.eff = me.eff AND a.seq < coalesce($7::bigint, 9223372036854775807))))
        ), locked AS MATERIALIZED (
          SELECT l.target_id, l.lease_token IS NOT NULL AS was_held, l.owner AS previous_owner
          FROM ${lease} l, open o
          WHERE o.has_row AND l.target_id = $1 AND l.slot = 0 AND NOT ${taken('l')}${early ? ' AND false' : ''}
          FOR NO KEY UPDATE OF l
        ), drawn AS MATERIALIZED (
          -- The token is drawn here, after the row lock (locked is materialized first): larger than every earlier
          -- grant of the key. Materialized: once per row, whichever plan joins it below (and scans it again).
          SELECT k.*, ${nextval} AS v FROM locked k
        ), won_old AS (
          UPDATE ${lease} AS l SET lease_token = $2::uuid, fencing_token = ${historyToken('x.v', 'l.fencing_token')}, owner = $3,
            priority = $4, lease_timeout_ms = $5, acquired_at = clock_timestamp(), updated_at = clock_timestamp(),
            hold_ms = $9
          FROM drawn x, (SELECT ${timeline} AS timeline) h
          WHERE l.target_id = $1 AND l.slot = 0
          RETURNING l.fencing_token, x.was_held AS took_over, CASE WHEN x.was_held THEN x.previous_owner END
            AS previous_owner
        ), won_new AS (
          INSERT INTO ${lease} AS l
            (target_id, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at, updated_at, hold_ms)
          SELECT $1, $2::uuid, ${historyToken('f.v', highWaterToken(lease))}, $3, $4, $5, clock_timestamp(), clock_timestamp(), $9
          FROM (SELECT ${nextval} AS v FROM open o WHERE ${early ? 'true' : 'NOT o.has_row'}) f, (SELECT ${timeline} AS timeline) h
          -- A concurrent first insert of the key committed meanwhile: its row is taken if it is free by then, with a
          -- token drawn after the row lock (the value drawn above is then left unused).
          ON CONFLICT (target_id, slot) DO UPDATE SET
            lease_token = EXCLUDED.lease_token, fencing_token = ${early ? 'EXCLUDED.fencing_token' : historyOrdered(fencingSequence, timeline, 'l.fencing_token')},
            owner = EXCLUDED.owner, priority = EXCLUDED.priority, lease_timeout_ms = EXCLUDED.lease_timeout_ms,
            acquired_at = EXCLUDED.acquired_at, updated_at = EXCLUDED.updated_at, hold_ms = EXCLUDED.hold_ms
          WHERE NOT ${taken('l')}
          RETURNING l.fencing_token
        ), given AS (
          -- A grant a release handed this waiter (direct handoff: its lease token is its waiter id, see
          -- handoff.sql.ts), found here when its NOTIFY was missed or its confirmation failed: confirmed as in
          -- confirmGrantSql, and as durably (this statement commits with the session's synchronous_commit = on).
          UPDATE ${lease} AS l SET lease_timeout_ms = $5, hold_ms = $9, updated_at = clock_timestamp()
          WHERE l.target_id = $1 AND l.slot = 0 AND $6::uuid IS NOT NULL AND l.lease_token = $6::uuid AND ${live('l')}
          RETURNING l.fencing_token
        ), won AS (
          SELECT fencing_token, took_over, previous_owner FROM won_old
          UNION ALL
          SELECT fencing_token, false, NULL FROM won_new
          UNION ALL
          SELECT fencing_token, false, NULL FROM given
        ), granted AS (
          -- Dead waiters go with the grant: they were skipped, and no live waiter may be left to evict them. Only
          -- when the target has a line at all (the uncontended path skips the probe).
          DELETE FROM ${waiter} w
          WHERE w.target_id = $1 AND EXISTS (SELECT 1 FROM line) AND EXISTS (SELECT 1 FROM won)
            AND (w.waiter_id = $6::uuid OR NOT ${liveWaiter('w')})
        ), queued AS (
          ${queued}
        )
        SELECT won.fencing_token::text AS fencing_token, won.took_over, won.previous_owner,
          NULL::float8 AS hold_left_ms, NULL AS seq, NULL::timestamptz AS queued_at, NULL::boolean AS behind,
          ${runCap(capMs)} AS overran
        FROM won
        UNION ALL
        -- Refused: its place in line when it was queued, and, with no live holder left and only a hold's tail in the
        -- way, when that tail ends (no NOTIFY will say so).
        SELECT NULL, NULL, NULL, r.hold_left_ms, q.seq::text, q.queued_at, q.behind, NULL
        FROM (SELECT (SELECT (extract(epoch FROM l.acquired_at + l.hold_ms ${MS} - clock_timestamp()) * 1000)::float8
            FROM ${lease} l WHERE l.target_id = $1 AND l.slot = 0 AND NOT ${live('l')} AND ${holding('l')}) AS hold_left_ms) r
        LEFT JOIN queued q ON true
        WHERE NOT EXISTS (SELECT 1 FROM won) AND (r.hold_left_ms IS NOT NULL OR q.seq IS NOT NULL)`;
}

/**
 * The set-based acquire: the rules of the single statement (`LeaseStore.tryAcquire`) applied to every caller of a
 * batch, in one statement and one commit. $1 jsonb array of `AcquireBatchItem` (i = 1 … n), $2 owner, $3 the
 * module's lease timeout ms (a caller without its own `lease_timeout_ms`), $4 aging interval ms (NULL: off). One row
 * per caller, ordered by i.
 * - One candidate per key: the caller the no-barging rule would let through first. A duplicate key inside one batch
 *   has exactly one winner; if the candidate is refused, so is every other caller of the key in the batch.
 * - A key that is taken, or has a live waiter ahead of its candidate, is refused by a read-only pre-check: no row
 *   lock, no WAL, no transaction id for a batch that wins nothing.
 * - Existing free rows (released, or expired: a takeover) are locked in key order and never waited for (SKIP
 *   LOCKED), so concurrent batches of several processes cannot deadlock and one stalled row never stalls the batch;
 *   the lock re-checks the row's latest version. The fencing token is drawn in the UPDATE, after the row lock: larger
 *   than every earlier grant of the key.
 * - Keys that never had a row are inserted in key order (`ON CONFLICT DO NOTHING`): no earlier grant exists.
 * - A row the batch could not lock at once, or that a concurrent statement took or inserted meanwhile, is `retry`:
 *   that caller alone goes the single statement, which waits for the row lock as it always did.
 * - A granted waiter's own row, and the dead waiters of the won keys, are deleted in the same statement.
 */
export function batchAcquireSql(n: LeaseObjectNames, timeline: string, capMs: number): string {
  const { lease, waiter, fencingSequence } = n;
  const nextvalArg = sequenceLiteral(fencingSequence);
  // The batch never waits for a lock one caller's key is under (set first: every write of the statement reads
  // history): past BATCH_LOCK_WAIT_MS the statement fails whole, and its callers go alone (see tryAcquire).
  return `WITH history AS MATERIALIZED (
      SELECT ${timeline} AS timeline, set_config('lock_timeout', '${BATCH_LOCK_WAIT_MS}', true) AS lock_bound
    ), req AS (
      SELECT * FROM jsonb_to_recordset($1::jsonb)
        AS r(i int, target_id text, lease_token uuid, priority int, waiter_id uuid, waiter_seq bigint, hold_ms int,
          lease_timeout_ms int)
      ${ONE_ROW_ESTIMATE}
    ), mine AS (
      -- Each caller's effective priority: a queued waiter ages from when it first queued; a newcomer has waited 0.
      SELECT r.*, coalesce((SELECT ${aged('me.queued_at', '$4')} FROM ${waiter} me
        WHERE me.target_id = r.target_id AND me.waiter_id = r.waiter_id), r.priority::bigint) AS eff
      FROM req r
    ), cand AS (
      SELECT DISTINCT ON (m.target_id) m.* FROM mine m
      ORDER BY m.target_id, m.eff DESC, m.waiter_seq NULLS LAST, m.i
    ), open AS MATERIALIZED (
      SELECT c.*, EXISTS (SELECT 1 FROM ${lease} l WHERE l.target_id = c.target_id AND l.slot = 0) AS has_row
      FROM cand c
      -- Any row of the key taken (its own, or a semaphore's or read-write holder's slot: see singleAcquireSql).
      WHERE NOT EXISTS (SELECT 1 FROM ${lease} l WHERE l.target_id = c.target_id AND ${taken('l')})
        AND NOT EXISTS (
          SELECT 1 FROM ${waiter} w
          WHERE w.target_id = c.target_id AND w.waiter_id IS DISTINCT FROM c.waiter_id AND ${liveWaiter('w')}
            AND (${aged('w.queued_at', '$4')} > c.eff
              OR (${aged('w.queued_at', '$4')} = c.eff AND w.seq < coalesce(c.waiter_seq, 9223372036854775807))))
    ), locked AS MATERIALIZED (
      SELECT l.target_id, l.lease_token IS NOT NULL AS was_held, l.owner AS previous_owner
      FROM ${lease} l
      WHERE l.target_id = ANY (ARRAY(SELECT target_id FROM open WHERE has_row)) AND l.slot = 0 AND NOT ${taken('l')}
      ORDER BY l.target_id
      FOR NO KEY UPDATE OF l SKIP LOCKED
    ), drawn AS MATERIALIZED (
      -- The token is drawn here, per row, after the row lock (locked is materialized first): larger than every
      -- earlier grant of the key. Materialized: once per row, whichever plan joins it below.
      SELECT k.target_id, k.was_held, k.previous_owner, nextval(${nextvalArg}) AS v FROM locked k
    ), won_old AS (
      UPDATE ${lease} AS l SET lease_token = o.lease_token, fencing_token = ${historyToken('x.v', 'l.fencing_token')},
        owner = $2, priority = o.priority, lease_timeout_ms = coalesce(o.lease_timeout_ms, $3), acquired_at = clock_timestamp(),
        updated_at = clock_timestamp(), hold_ms = o.hold_ms
      FROM drawn x JOIN open o ON o.target_id = x.target_id, history h
      WHERE l.target_id = x.target_id AND l.slot = 0 AND ${byKeys('l', 'drawn')}
      RETURNING l.target_id, l.fencing_token, x.was_held, x.previous_owner
    ), won_new AS (
      INSERT INTO ${lease} AS l
        (target_id, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at, updated_at, hold_ms)
      SELECT f.target_id, f.lease_token, ${historyToken('f.v', highWaterToken(lease))}, $2, f.priority,
        coalesce(f.lease_timeout_ms, $3), clock_timestamp(), clock_timestamp(), f.hold_ms
      FROM (SELECT o.*, nextval(${nextvalArg}) AS v FROM open o WHERE NOT o.has_row) f, history h
      ORDER BY f.target_id
      ON CONFLICT (target_id, slot) DO NOTHING
      RETURNING l.target_id, l.fencing_token
    ), won AS (
      SELECT target_id, fencing_token, was_held AS took_over,
        CASE WHEN was_held THEN previous_owner END AS previous_owner
      FROM won_old
      UNION ALL
      SELECT target_id, fencing_token, false, NULL FROM won_new
    ), granted AS (
      DELETE FROM ${waiter} w USING won, open o
      WHERE w.target_id = won.target_id AND o.target_id = won.target_id AND w.waiter_id = o.waiter_id
    ), dead AS (
      -- Dead waiters of the won keys were skipped; no live waiter may be left to evict them. Never waited for.
      DELETE FROM ${waiter} w USING (
        SELECT d.target_id, d.waiter_id FROM ${waiter} d JOIN won ON d.target_id = won.target_id
        WHERE NOT ${liveWaiter('d')}
        ORDER BY d.target_id, d.waiter_id
        FOR UPDATE OF d SKIP LOCKED
      ) x
      WHERE w.target_id = x.target_id AND w.waiter_id = x.waiter_id
    )
    SELECT m.i::int AS i,
      CASE WHEN w.target_id IS NOT NULL THEN 'won'
        WHEN o.target_id IS NULL OR EXISTS (SELECT 1 FROM won x WHERE x.target_id = m.target_id) THEN 'refused'
        ELSE 'retry' END AS outcome,
      w.fencing_token::text AS fencing_token, w.took_over, w.previous_owner,
      CASE WHEN w.target_id IS NULL THEN (
        SELECT (extract(epoch FROM l.acquired_at + l.hold_ms ${MS} - clock_timestamp()) * 1000)::float8
        FROM ${lease} l WHERE l.target_id = m.target_id AND l.slot = 0 AND NOT ${live('l')} AND ${holding('l')})
        END AS hold_left_ms,
      ${runCap(capMs)} AS overran
    FROM mine m
    LEFT JOIN open o ON o.target_id = m.target_id
    LEFT JOIN won w ON w.target_id = m.target_id AND o.i = m.i
    ORDER BY m.i`;
}

/**
 * The lone caller's acquisition (issue 27: a key with no waiter line): a newcomer that neither waits nor is queued,
 * the commonest call, skips everything only a line needs. Parameters: $1 target, $2 lease token, $3 owner, $4
 * priority, $5 lease timeout, $6 hold.
 *
 * - It writes only when the read-only pre-check (one probe of the key's row, one of its line) finds the key free of
 *   any holder (even an expired one) and without a single waiter row: a refusal on a held key takes no row lock and
 *   writes nothing, as in the single statement.
 * - One fencing-sequence value per grant, as in the single statement: a released row is locked first, checked again
 *   in its latest version and its token drawn after the lock; only a key that never had a row draws its token in the
 *   INSERT's source row, and an insert that meets a concurrent first insert of the key takes that row only if it is
 *   free by then (two values drawn, in that race alone).
 * - Whatever the pre-check let through but the lock did not (a waiter row, an expired holder to take over, a row
 *   changed meanwhile) comes back as `full`: the caller sends the single statement, whose rules decide (priority
 *   over the line, dead waiters, the takeover report). The answer is then exactly the single statement's.
 */
export function loneAcquireSql(n: LeaseObjectNames, timeline: string, capMs: number, faults: StatementFaults): string {
  const { lease, waiter, fencingSequence } = n;
  const nextval = `nextval(${sequenceLiteral(fencingSequence)})`;
  // The fault schedule's negative control (see statement-faults.ts): every grant through the INSERT, its token drawn
  // before the row lock.
  const early = faults.tokenBeforeLock;
  return `WITH open AS MATERIALIZED (
          SELECT coalesce(NOT ${taken('l')}, true) AS free, l.target_id IS NOT NULL AS has_row,
            coalesce(l.lease_token IS NULL AND NOT ${holding('l')}, true)
              AND NOT EXISTS (SELECT 1 FROM ${waiter} w WHERE w.target_id = $1)
              -- A slot row of the key (a semaphore's, a read-write holder's): the single statement decides.
              AND NOT EXISTS (SELECT 1 FROM ${lease} s WHERE s.target_id = $1 AND s.slot > 0 AND ${taken('s')}) AS lone
          FROM (SELECT 1) one LEFT JOIN ${lease} l ON l.target_id = $1 AND l.slot = 0
        ), locked AS MATERIALIZED (
          SELECT l.target_id FROM ${lease} l, open o
          WHERE o.lone AND o.has_row AND l.target_id = $1 AND l.slot = 0 AND l.lease_token IS NULL AND NOT ${holding('l')}${early ? ' AND false' : ''}
          FOR NO KEY UPDATE OF l
        ), drawn AS MATERIALIZED (
          -- The token is drawn here, after the row lock (locked is materialized first), once (see singleAcquireSql).
          SELECT k.*, ${nextval} AS v FROM locked k
        ), won_old AS (
          UPDATE ${lease} AS l SET lease_token = $2::uuid, fencing_token = ${historyToken('x.v', 'l.fencing_token')}, owner = $3,
            priority = $4, lease_timeout_ms = $5, acquired_at = clock_timestamp(), updated_at = clock_timestamp(),
            hold_ms = $6
          FROM drawn x, (SELECT ${timeline} AS timeline) h
          WHERE l.target_id = $1 AND l.slot = 0
          RETURNING l.fencing_token
        ), won_new AS (
          INSERT INTO ${lease} AS l
            (target_id, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at, updated_at, hold_ms)
          SELECT $1, $2::uuid, ${historyToken('f.v', highWaterToken(lease))}, $3, $4, $5, clock_timestamp(), clock_timestamp(), $6
          FROM (SELECT ${nextval} AS v FROM open o WHERE o.lone AND ${early ? 'true' : 'NOT o.has_row'}) f,
            (SELECT ${timeline} AS timeline) h
          ON CONFLICT (target_id, slot) DO UPDATE SET
            lease_token = EXCLUDED.lease_token,
            fencing_token = ${early ? 'EXCLUDED.fencing_token' : historyOrdered(fencingSequence, timeline, 'l.fencing_token')},
            owner = EXCLUDED.owner, priority = EXCLUDED.priority, lease_timeout_ms = EXCLUDED.lease_timeout_ms,
            acquired_at = EXCLUDED.acquired_at, updated_at = EXCLUDED.updated_at, hold_ms = EXCLUDED.hold_ms
          WHERE l.lease_token IS NULL AND NOT ${holding('l')}
          RETURNING l.fencing_token
        ), won AS (
          SELECT fencing_token FROM won_old UNION ALL SELECT fencing_token FROM won_new
        )
        SELECT won.fencing_token::text AS fencing_token, NULL::float8 AS hold_left_ms, false AS full,
          ${runCap(capMs)} AS overran
        FROM won
        UNION ALL
        -- Refused by the pre-check (a holder, or a hold's tail: when it ends), or let through by it and not won.
        SELECT NULL, (SELECT (extract(epoch FROM l.acquired_at + l.hold_ms ${MS} - clock_timestamp()) * 1000)::float8
            FROM ${lease} l WHERE l.target_id = $1 AND l.slot = 0 AND NOT ${live('l')} AND ${holding('l')}), o.free, NULL
        FROM open o WHERE NOT EXISTS (SELECT 1 FROM won)`;
}
