/**
 * The statements of semaphores (`limit` above 1; docs/semaphores.md): the acquisition of a slot,
 * and the release of one (waking as many of the key's waiters as slots are free). Slot `i` of a key is its lease row
 * `(key, i + 1)` (see options/slot-limits.ts), an ordinary lease row, so renewals, fenced transactions and `list()`
 * need no statement of their own; each records the limit it was granted under (`slot_limit`). Waiters queue in the
 * key's own line (the waiter table under the key), with the single holder's rules.
 */
import { notifyHeadSql } from '../../database/head-payload.js';
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
import { historyToken, sequenceLiteral } from './fencing-token.js';
import { highWaterToken } from './token-floor.sql.js';

/**
 * The acquisition of a slot (its contract: `SemaphoreStore.tryAcquire`). Parameters as the single statement's
 * (`singleAcquireSql`): $1 key, $2 lease token, $3 owner, $4 priority, $5 lease timeout, $6 the caller's waiter id, $7
 * its waiter seq, $8 aging interval, $9 hold; and $10 the limit. Its row's slot comes back (1 … $10).
 *
 * - The read-only pre-check refuses, with no row lock and no write, when another limit holds the key (a live slot row
 *   of the key granted under another limit — any slot row, a range of the primary key — or a live single holder of
 *   the key: `held_limit`), when no slot is free, or when as many live waiters are ahead of the caller as slots are
 *   free (no barging: the first f of the line may take the f free slots).
 * - The lowest free slot row that can be locked at once is taken (SKIP LOCKED: a concurrent acquisition locking one
 *   slot sends this one to the next); the lock re-checks the row's latest version, and the fencing token is drawn
 *   after it, so it is larger than every earlier grant of that slot. A slot that never had a row is inserted (no
 *   earlier grant of it exists). An attempt that passed the pre-check but found every slot it aimed at taken by
 *   concurrent acquisitions meanwhile is refused as \`raced\` (its caller sends it again).
 * - A granted waiter's row and the key's dead waiters are deleted in the same statement.
 */
export function semaphoreAcquireSql(n: LeaseObjectNames, timeline: string, capMs: number): string {
  const { lease, waiter, fencingSequence } = n;
  const nextval = `nextval(${sequenceLiteral(fencingSequence)})`;
  const columns =
    'target_id, slot, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at, updated_at, hold_ms, slot_limit';
  return `WITH key_slots AS MATERIALIZED (
          -- Every slot row of the key (whatever limit granted it): another limit shows in any of them.
          SELECT l.slot, ${taken('l')} AS taken, l.slot_limit FROM ${lease} l WHERE l.target_id = $1 AND l.slot > 0
        ), slots AS MATERIALIZED (
          -- This call's slots, 1 … $10, and whether each has a row and is taken.
          SELECT g AS slot, r.slot IS NOT NULL AS has_row, coalesce(r.taken, false) AS taken
          FROM generate_series(1, $10::int) g LEFT JOIN key_slots r ON r.slot = g
        ), other AS MATERIALIZED (
          SELECT coalesce(
            (SELECT r.slot_limit FROM key_slots r WHERE r.taken AND r.slot_limit IS DISTINCT FROM $10::int LIMIT 1),
            (SELECT 1 FROM ${lease} p WHERE p.target_id = $1 AND p.slot = 0 AND ${live('p')})) AS held_limit
        ), free AS MATERIALIZED (
          SELECT count(*) AS slots FROM slots s WHERE NOT s.taken
        ), line AS MATERIALIZED (
          SELECT w.waiter_id, w.seq, ${aged('w.queued_at', '$8')} AS eff, ${liveWaiter('w')} AS live
          FROM ${waiter} w WHERE w.target_id = $1
        ), me AS (
          SELECT CASE WHEN $6::uuid IS NULL THEN $4::bigint
            ELSE coalesce((SELECT eff FROM line WHERE waiter_id = $6::uuid), $4::bigint) END AS eff
        ), open AS MATERIALIZED (
          SELECT 1 AS ok FROM other o, free f, me
          WHERE o.held_limit IS NULL AND f.slots > 0
            AND (SELECT count(*) FROM line a WHERE a.live AND a.waiter_id IS DISTINCT FROM $6::uuid
              AND (a.eff > me.eff OR (a.eff = me.eff AND a.seq < coalesce($7::bigint, 9223372036854775807)))) < f.slots
        ), locked AS MATERIALIZED (
          SELECT l.slot, l.lease_token IS NOT NULL AS was_held, l.owner AS previous_owner
          FROM ${lease} l JOIN slots s ON l.target_id = $1 AND l.slot = s.slot, open o
          WHERE s.has_row AND NOT ${taken('l')}
          ORDER BY l.slot LIMIT 1
          FOR NO KEY UPDATE OF l SKIP LOCKED
        ), drawn AS MATERIALIZED (
          -- After the row lock, once (see singleAcquireSql).
          SELECT k.*, ${nextval} AS v FROM locked k
        ), won_old AS (
          UPDATE ${lease} AS l SET lease_token = $2::uuid, fencing_token = ${historyToken('x.v', 'l.fencing_token')}, owner = $3,
            priority = $4, lease_timeout_ms = $5, acquired_at = clock_timestamp(), updated_at = clock_timestamp(),
            hold_ms = $9, slot_limit = $10
          FROM drawn x, (SELECT ${timeline} AS timeline) h
          WHERE l.target_id = $1 AND l.slot = x.slot
          RETURNING l.slot, l.fencing_token, x.was_held AS took_over,
            CASE WHEN x.was_held THEN x.previous_owner END AS previous_owner
        ), won_new AS (
          INSERT INTO ${lease} AS l (${columns})
          SELECT $1, f.slot, $2::uuid, ${historyToken('f.v', highWaterToken(lease))}, $3, $4, $5, clock_timestamp(), clock_timestamp(), $9, $10
          FROM (SELECT c.slot, ${nextval} AS v FROM (
              SELECT s.slot FROM slots s, open o
              WHERE NOT s.has_row AND NOT EXISTS (SELECT 1 FROM locked)
              ORDER BY s.slot LIMIT 1) c) f, (SELECT ${timeline} AS timeline) h
          ON CONFLICT (target_id, slot) DO NOTHING
          RETURNING l.slot, l.fencing_token
        ), won AS (
          SELECT slot, fencing_token, took_over, previous_owner FROM won_old
          UNION ALL
          SELECT slot, fencing_token, false, NULL FROM won_new
        ), granted AS (
          DELETE FROM ${waiter} w
          WHERE w.target_id = $1 AND EXISTS (SELECT 1 FROM line) AND EXISTS (SELECT 1 FROM won)
            AND (w.waiter_id = $6::uuid OR NOT ${liveWaiter('w')})
        )
        SELECT won.slot, won.fencing_token::text AS fencing_token, won.took_over, won.previous_owner,
          NULL::float8 AS hold_left_ms, NULL::int AS held_limit, NULL::boolean AS raced, ${runCap(capMs)} AS overran
        FROM won
        UNION ALL
        -- Refused: the limit another caller holds the key with; when the first hold's tail ends (no NOTIFY says so);
        -- whether it passed the pre-check but lost the slots it aimed at to concurrent acquisitions (\`raced\`).
        SELECT NULL, NULL, NULL, NULL, r.hold_left_ms, o.held_limit::int, EXISTS (SELECT 1 FROM open), NULL
        FROM other o, (SELECT (SELECT min(extract(epoch FROM l.acquired_at + l.hold_ms ${MS} - clock_timestamp()) * 1000)::float8
            FROM ${lease} l WHERE l.target_id = $1 AND l.slot BETWEEN 1 AND $10::int
              AND NOT ${live('l')} AND ${holding('l')}) AS hold_left_ms) r
        WHERE NOT EXISTS (SELECT 1 FROM won)`;
}

/**
 * The release of a slot (its contract: `SemaphoreStore.release`): the single release statement's rules
 * (`singleReleaseSql`: soft, token-guarded, $1 key, $2 lease token, $3 head-only NOTIFY channel, $4
 * asyncReleaseCommits, $5 aging interval, $6 lock bound), and $7 the slot's row (1 … limit). It wakes as many of the
 * key's live waiters, in grant order, as slots are free once this one is (each names its waiter: `<waiter id> <key>`).
 */
export function semaphoreReleaseSql(n: LeaseObjectNames): string {
  const { lease, waiter } = n;
  return `WITH bound AS MATERIALIZED (
          SELECT set_config('lock_timeout', $6::text, true) AS lock_timeout
        ), gone AS (
          UPDATE ${lease} SET lease_token = NULL
          WHERE target_id = $1 AND slot = $7::int AND lease_token = $2::uuid AND EXISTS (SELECT 1 FROM bound)
          RETURNING slot_limit
        ), free AS (
          -- This statement still sees the slot it frees as taken: one more.
          SELECT 1 + coalesce(g.slot_limit, 1) - (SELECT count(*) FROM ${lease} l
            WHERE l.target_id = $1 AND l.slot BETWEEN 1 AND coalesce(g.slot_limit, 1) AND ${taken('l')}) AS slots
          FROM gone g
        ), heads AS (
          SELECT w.waiter_id FROM ${waiter} w
          WHERE w.target_id = $1 AND ${liveWaiter('w')} AND EXISTS (SELECT 1 FROM gone)
          ORDER BY ${aged('w.queued_at', '$5')} DESC, w.seq
          LIMIT (SELECT greatest(slots, 1) FROM free)
        ), woke AS (
          SELECT ${notifyHeadSql('$3', 'h.waiter_id', '$1')} FROM heads h WHERE $3::text IS NOT NULL
        )
        SELECT EXISTS (SELECT 1 FROM gone) AS released, (SELECT count(*) FROM woke) AS woke,
          CASE WHEN $4::boolean THEN set_config('synchronous_commit', 'off', true) END AS async_commit`;
}

/**
 * The set-based acquisition of slots (its contract: `SemaphoreStore.tryAcquire`): the rules of the single slot
 * statement (`semaphoreAcquireSql`) applied to every caller of a batch, in one statement and one commit, the way
 * `batchAcquireSql` does for single holders. $1 jsonb array of `SlotBatchItem` (i = 1 … n; newcomers only: a waiter's
 * attempt goes alone), $2 owner, $3 the module's lease timeout ms (a caller without its own), $4 aging interval ms
 * (NULL: off). One row per caller, ordered by i.
 *
 * - A key's callers are taken in grant order (priority, then their order in the batch); the limit of the key's first
 *   one is the key's in this batch, and a caller asking another limit is `raced` (sent again alone: the single
 *   statement answers it).
 * - The read-only pre-check, per key, as the single statement's: another limit holds the key (`held_limit`: every
 *   caller of the key refused with it), or the key's k-th caller (from 0) is refused when k + the live waiters ahead
 *   of it reach the free slots — what the single statement answers each of them in that order. No row lock, no WAL,
 *   for a key that wins nothing.
 * - The k-th caller let through aims at the key's k-th lowest free slot: distinct slots, never more than `limit`.
 *   Free rows are locked in key and slot order, never waited for (SKIP LOCKED), and checked again in their latest
 *   version; the fencing token is drawn after the lock. A slot that never had a row is inserted (`ON CONFLICT DO
 *   NOTHING`: no earlier grant of it exists). A caller whose slot was locked, taken or inserted by a concurrent
 *   statement meanwhile is `raced`: sent again (alone), as the single statement's race.
 * - The statement waits for no lock (BATCH_LOCK_WAIT_MS, as `batchAcquireSql`): one that meets one fails whole on the
 *   server, and is split. The dead waiters of the won keys are deleted in the same statement (never waited for).
 */
export function semaphoreBatchAcquireSql(n: LeaseObjectNames, timeline: string, capMs: number): string {
  const { lease, waiter, fencingSequence } = n;
  const nextval = `nextval(${sequenceLiteral(fencingSequence)})`;
  const columns =
    'target_id, slot, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at, updated_at, hold_ms, slot_limit';
  return `WITH history AS MATERIALIZED (
      SELECT ${timeline} AS timeline, set_config('lock_timeout', '${BATCH_LOCK_WAIT_MS}', true) AS lock_bound
    ), req AS MATERIALIZED (
      SELECT r.*, first_value(r.slot_limit) OVER (PARTITION BY r.target_id ORDER BY r.priority DESC, r.i) AS key_limit
      FROM jsonb_to_recordset($1::jsonb)
        AS r(i int, target_id text, lease_token uuid, priority int, hold_ms int, lease_timeout_ms int, slot_limit int)
      ${ONE_ROW_ESTIMATE}
    ), keys AS MATERIALIZED (
      SELECT DISTINCT r.target_id, r.key_limit FROM req r
    ), key_slots AS MATERIALIZED (
      -- Every slot row of the batch's keys (whatever limit granted it): another limit shows in any of them.
      SELECT l.target_id, l.slot, ${taken('l')} AS taken, l.slot_limit
      FROM keys k JOIN ${lease} l ON l.target_id = k.target_id AND l.slot > 0 AND ${byKeys('l', 'keys')}
    ), other AS MATERIALIZED (
      SELECT k.target_id, coalesce(
        (SELECT s.slot_limit FROM key_slots s
          WHERE s.target_id = k.target_id AND s.taken AND s.slot_limit IS DISTINCT FROM k.key_limit LIMIT 1),
        (SELECT 1 FROM ${lease} p WHERE p.target_id = k.target_id AND p.slot = 0 AND ${live('p')})) AS held_limit
      FROM keys k
    ), free AS MATERIALIZED (
      -- Each key's free slots, 1 … its limit, lowest first (rank), and whether each has a row.
      SELECT k.target_id, g.slot, s.slot IS NOT NULL AS has_row,
        row_number() OVER (PARTITION BY k.target_id ORDER BY g.slot) AS rank
      FROM keys k CROSS JOIN LATERAL generate_series(1, k.key_limit) AS g(slot)
      LEFT JOIN key_slots s ON s.target_id = k.target_id AND s.slot = g.slot
      WHERE NOT coalesce(s.taken, false)
    ), line AS MATERIALIZED (
      SELECT w.target_id, ${aged('w.queued_at', '$4')} AS eff
      FROM keys k JOIN ${waiter} w ON w.target_id = k.target_id WHERE ${liveWaiter('w')} AND ${byKeys('w', 'keys')}
    ), mine AS MATERIALIZED (
      -- The key's callers of its limit in grant order (rank), and the live waiters ahead of each (a newcomer passes
      -- only those of a lower effective priority).
      SELECT r.*, row_number() OVER (PARTITION BY r.target_id ORDER BY r.priority DESC, r.i) AS rank,
        (SELECT count(*) FROM line a WHERE a.target_id = r.target_id AND a.eff >= r.priority) AS ahead
      FROM req r WHERE r.slot_limit = r.key_limit
    ), aim AS MATERIALIZED (
      SELECT m.*, f.slot, f.has_row
      FROM mine m JOIN other o ON o.target_id = m.target_id
        JOIN free f ON f.target_id = m.target_id AND f.rank = m.rank
      WHERE o.held_limit IS NULL
        AND m.rank - 1 + m.ahead < (SELECT count(*) FROM free c WHERE c.target_id = m.target_id)
    ), locked AS MATERIALIZED (
      SELECT l.target_id, l.slot, l.lease_token IS NOT NULL AS was_held, l.owner AS previous_owner
      FROM ${lease} l JOIN aim a ON l.target_id = a.target_id AND l.slot = a.slot
      WHERE a.has_row AND NOT ${taken('l')} AND ${byKeys('l', 'aim')}
      ORDER BY l.target_id, l.slot
      FOR NO KEY UPDATE OF l SKIP LOCKED
    ), drawn AS MATERIALIZED (
      -- After the row lock, once per row (see batchAcquireSql).
      SELECT k.*, ${nextval} AS v FROM locked k
    ), won_old AS (
      UPDATE ${lease} AS l SET lease_token = a.lease_token, fencing_token = ${historyToken('x.v', 'l.fencing_token')},
        owner = $2, priority = a.priority, lease_timeout_ms = coalesce(a.lease_timeout_ms, $3),
        acquired_at = clock_timestamp(), updated_at = clock_timestamp(), hold_ms = a.hold_ms, slot_limit = a.slot_limit
      FROM drawn x JOIN aim a ON a.target_id = x.target_id AND a.slot = x.slot, history h
      WHERE l.target_id = x.target_id AND l.slot = x.slot AND ${byKeys('l', 'drawn')}
      RETURNING l.target_id, l.slot, l.fencing_token, x.was_held AS took_over,
        CASE WHEN x.was_held THEN x.previous_owner END AS previous_owner
    ), won_new AS (
      INSERT INTO ${lease} AS l (${columns})
      SELECT f.target_id, f.slot, f.lease_token, ${historyToken('f.v', highWaterToken(lease))}, $2, f.priority,
        coalesce(f.lease_timeout_ms, $3), clock_timestamp(), clock_timestamp(), f.hold_ms, f.slot_limit
      FROM (SELECT a.*, ${nextval} AS v FROM aim a WHERE NOT a.has_row) f, history h
      ORDER BY f.target_id, f.slot
      ON CONFLICT (target_id, slot) DO NOTHING
      RETURNING l.target_id, l.slot, l.fencing_token
    ), won AS (
      SELECT target_id, slot, fencing_token, took_over, previous_owner FROM won_old
      UNION ALL
      SELECT target_id, slot, fencing_token, false, NULL FROM won_new
    ), dead AS (
      -- Dead waiters of the won keys were skipped; no live waiter may be left to evict them. Never waited for.
      DELETE FROM ${waiter} w USING (
        SELECT d.target_id, d.waiter_id FROM ${waiter} d
        WHERE ${byKeys('d', 'won')} AND NOT ${liveWaiter('d')}
        ORDER BY d.target_id, d.waiter_id
        FOR UPDATE OF d SKIP LOCKED
      ) x
      WHERE w.target_id = x.target_id AND w.waiter_id = x.waiter_id AND ${byKeys('w', 'won')}
    )
    SELECT r.i::int AS i,
      CASE WHEN w.slot IS NOT NULL THEN 'won' WHEN a.i IS NOT NULL OR r.slot_limit <> r.key_limit THEN 'raced'
        ELSE 'refused' END AS outcome,
      w.slot, w.fencing_token::text AS fencing_token, w.took_over, w.previous_owner,
      CASE WHEN a.i IS NULL AND r.slot_limit = r.key_limit THEN o.held_limit::int END AS held_limit,
      CASE WHEN a.i IS NULL AND r.slot_limit = r.key_limit THEN (
        SELECT min(extract(epoch FROM l.acquired_at + l.hold_ms ${MS} - clock_timestamp()) * 1000)::float8
        FROM ${lease} l WHERE l.target_id = r.target_id AND l.slot BETWEEN 1 AND r.slot_limit
          AND NOT ${live('l')} AND ${holding('l')}) END AS hold_left_ms,
      ${runCap(capMs)} AS overran
    FROM req r
    JOIN other o ON o.target_id = r.target_id
    LEFT JOIN aim a ON a.i = r.i
    LEFT JOIN won w ON w.target_id = a.target_id AND w.slot = a.slot
    ORDER BY r.i`;
}

/**
 * The set-based release of semaphores' slots (its contract: `SemaphoreStore.release`): the single slot release's rules
 * (`semaphoreReleaseSql`) for every caller of a batch, in one statement and one commit. $1 jsonb array of `{ i,
 * target_id, slot, lease_token }`, $2 the head-only NOTIFY channel (NULL: none), $3 asyncReleaseCommits, $4 aging
 * interval ms (NULL: off). Rows are locked in key and slot order and never waited for: a row locked by another
 * transaction (a fenced write of the holder's, say) is `retry`, and that caller alone sends the single statement,
 * which waits for it. Each key with a slot released wakes as many of its live waiters, in grant order, as slots are
 * free once they are.
 */
export function semaphoreBatchReleaseSql(n: LeaseObjectNames): string {
  const { lease, waiter } = n;
  return `WITH req AS (
      SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(i int, target_id text, slot int, lease_token uuid)
      ${ONE_ROW_ESTIMATE}
    ), locked AS MATERIALIZED (
      -- A slot's lease token lives on that one row (see batchReleaseSql): arrays, not a join.
      SELECT l.target_id, l.slot, l.lease_token, l.slot_limit FROM ${lease} l
      WHERE ${byKeys('l', 'req')} AND l.slot > 0 AND l.lease_token = ANY (ARRAY(SELECT lease_token FROM req))
      ORDER BY l.target_id, l.slot
      FOR NO KEY UPDATE OF l SKIP LOCKED
    ), gone AS (
      UPDATE ${lease} AS l SET lease_token = NULL
      WHERE ${byKeys('l', 'locked')} AND l.slot > 0 AND l.lease_token = ANY (ARRAY(SELECT lease_token FROM locked))
      RETURNING l.target_id
    ), free AS (
      -- This statement still sees the slots it frees as taken: as many more.
      SELECT g.target_id, g.freed + g.lim - (SELECT count(*) FROM ${lease} l
          WHERE l.target_id = g.target_id AND l.slot BETWEEN 1 AND g.lim AND ${taken('l')}) AS slots
      FROM (SELECT k.target_id, count(*) AS freed, coalesce(max(k.slot_limit), 1) AS lim
        FROM locked k GROUP BY k.target_id) g
    ), heads AS (
      SELECT f.target_id, h.waiter_id FROM free f CROSS JOIN LATERAL (
        SELECT w.waiter_id FROM ${waiter} w
        WHERE w.target_id = f.target_id AND ${liveWaiter('w')} AND EXISTS (SELECT 1 FROM gone)
        ORDER BY ${aged('w.queued_at', '$4')} DESC, w.seq
        LIMIT greatest(f.slots, 1)) h
    ), woke AS (
      SELECT ${notifyHeadSql('$2', 'h.waiter_id', 'h.target_id')} FROM heads h WHERE $2::text IS NOT NULL
    )
    SELECT r.i::int AS i,
      CASE WHEN EXISTS (SELECT 1 FROM locked k
            WHERE k.target_id = r.target_id AND k.slot = r.slot AND k.lease_token = r.lease_token)
          THEN 'released'
        WHEN EXISTS (SELECT 1 FROM ${lease} l
            WHERE l.target_id = r.target_id AND l.slot = r.slot AND l.lease_token = r.lease_token)
          THEN 'retry'
        ELSE 'gone' END AS outcome,
      (SELECT count(*) FROM woke) AS woke,
      CASE WHEN $3::boolean THEN set_config('synchronous_commit', 'off', true) END AS async_commit
    FROM req r ORDER BY r.i`;
}
