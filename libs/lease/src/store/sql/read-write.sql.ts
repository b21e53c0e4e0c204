/**
 * The statements of read-write leases (docs/read-write.md): a reader's grant (`mode: 'shared'`) and a writer's
 * (`mode: 'exclusive'`). Both are rows of the key like a semaphore's slots (see options/slot-limits.ts): the writer's
 * row is row slot 1 (`slot_limit` -1), each reader has a row of its own (row slots 2 … MAX_READERS + 1, `slot_limit`
 * 0). Renewals, fenced transactions, releases (`semaphoreReleaseSql`) and `list()` are a slot row's.
 *
 * Parameters as the semaphore's acquisition (`semaphoreAcquireSql`): $1 key, $2 lease token, $3 owner, $4 priority,
 * $5 lease timeout, $6 the caller's waiter id, $7 its waiter seq, $8 aging interval, $9 hold; and a reader's $10 the
 * head-only NOTIFY channel (NULL: none) and $11 the most readers at once.
 *
 * How the two never overlap, though a reader and a writer take different rows (READ COMMITTED, one statement each):
 * the writer's row is the key's gate. A reader's grant writes it (a new row version, clearing a dead writer's token)
 * before it takes its own row, only while no writer holds it (re-checked on its latest version under the row lock);
 * a writer locks it, and is granted only if the version it locked is the one its snapshot read: a reader granted
 * after the writer's snapshot was taken wrote a newer one (the writer then reports `raced` and sends the statement
 * again, with a snapshot that sees that reader). The writer then locks every reader's row that is not free, reads
 * their latest versions (a renewal or a fenced transaction in flight is waited for), and is granted only when none
 * is live or in its hold: it clears the token of each expired one (a takeover), so a dead reader's renewals and
 * fenced transactions find their row lost. Its fencing token is drawn after those locks: above every reader's.
 *
 * The line is the key's one priority line, each grant under the single holder's rule: no live waiter ahead of the
 * caller, whatever its mode (so a reader arriving after a waiting writer queues behind it). A reader's grant wakes
 * the next in line (it may be a reader, granted beside it; a writer retries and is refused while readers hold), and
 * a release wakes the head (see `semaphoreReleaseSql`).
 */
import { notifyHeadSql } from '../../database/head-payload.js';
import { EXCLUSIVE_LIMIT, OWN_ROW_SLOT, SHARED_LIMIT, WRITER_ROW_SLOT } from '../../options/slot-limits.js';
import { aged, holding, live, liveWaiter, runCap, taken, type LeaseObjectNames } from './fragments.js';
import { historyToken, sequenceLiteral } from './fencing-token.js';
import { NO_FAULTS, type StatementFaults } from './statement-faults.js';
import { highWaterToken } from './token-floor.sql.js';

const COLUMNS =
  'target_id, slot, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at, updated_at, hold_ms, slot_limit';

/** The CTEs both grants share: the key's rows, another kind of holder, the line, the caller's rank. */
function keyAndLine(lease: string, waiter: string): string {
  return `key_rows AS MATERIALIZED (
          SELECT l.slot, l.slot_limit, ${taken('l')} AS taken, ${live('l')} AS live, l.xmin::text AS version
          FROM ${lease} l WHERE l.target_id = $1 AND l.slot >= ${OWN_ROW_SLOT}
        ), other AS MATERIALIZED (
          -- A single holder (1) or a semaphore (its limit) holds the key: it is not a read-write key now.
          SELECT coalesce(
            (SELECT 1 FROM key_rows r WHERE r.slot = ${OWN_ROW_SLOT} AND r.live),
            (SELECT r.slot_limit FROM key_rows r WHERE r.slot > ${OWN_ROW_SLOT} AND r.taken AND r.slot_limit > 0 LIMIT 1)
          ) AS held_limit
        ), line AS MATERIALIZED (
          SELECT w.waiter_id, w.seq, ${aged('w.queued_at', '$8')} AS eff, ${liveWaiter('w')} AS live
          FROM ${waiter} w WHERE w.target_id = $1
        ), me AS (
          SELECT CASE WHEN $6::uuid IS NULL THEN $4::bigint
            ELSE coalesce((SELECT eff FROM line WHERE waiter_id = $6::uuid), $4::bigint) END AS eff
        ), ahead AS MATERIALIZED (
          SELECT count(*) AS n FROM line a, me WHERE a.live AND a.waiter_id IS DISTINCT FROM $6::uuid
            AND (a.eff > me.eff OR (a.eff = me.eff AND a.seq < coalesce($7::bigint, 9223372036854775807)))
        )`;
}

/** The answer both give: the grant, or the refusal (another kind of holder; `raced`: sent again). */
function answer(won: string, extra: string): string {
  return `SELECT won.slot, won.fencing_token::text AS fencing_token, won.took_over, won.previous_owner,
          NULL::float8 AS hold_left_ms, NULL::int AS held_limit, NULL::boolean AS raced, ${extra}
        FROM ${won} won
        UNION ALL
        SELECT NULL, NULL, NULL, NULL, NULL, o.held_limit::int, EXISTS (SELECT 1 FROM open), NULL, NULL
        FROM other o WHERE NOT EXISTS (SELECT 1 FROM ${won})`;
}

/** A reader's grant (its contract: `SemaphoreStore.tryAcquire` with `SHARED_LIMIT`). */
export function sharedAcquireSql(
  n: LeaseObjectNames,
  timeline: string,
  capMs: number,
  faults: StatementFaults = NO_FAULTS,
): string {
  const { lease, waiter, fencingSequence } = n;
  // Off except in the read-write exclusion test's negative control (see statement-faults.ts).
  const beside = faults.readerBesideWriter === true;
  const nextval = `nextval(${sequenceLiteral(fencingSequence)})`;
  return `WITH ${keyAndLine(lease, waiter)}, open AS MATERIALIZED (
          -- The read-only pre-check: no writer holds the key, no live waiter is ahead, a reader's row is left.
          SELECT 1 AS ok FROM other o, ahead a
          WHERE o.held_limit IS NULL AND a.n = 0
            AND ${beside ? 'true' : `NOT EXISTS (SELECT 1 FROM key_rows r WHERE r.slot = ${WRITER_ROW_SLOT} AND r.taken)`}
            AND (SELECT count(*) FROM key_rows r WHERE r.slot > ${WRITER_ROW_SLOT} AND r.taken) < $11::int
        ), gate AS MATERIALIZED (
          -- The writer's row gets a new version while no writer holds it (its latest version, under the row lock): a
          -- writer whose snapshot came before this grant sees it changed. A new one starts at the high-water mark,
          -- the floor of the writer's first grant on it.
          INSERT INTO ${lease} AS l (${COLUMNS})
          SELECT $1, ${WRITER_ROW_SLOT}, NULL, coalesce(${highWaterToken(lease)}, 0), $3, 0, $5, clock_timestamp(),
            clock_timestamp(), 0, ${EXCLUSIVE_LIMIT}
          FROM open
          ON CONFLICT (target_id, slot) DO UPDATE SET ${
            beside
              ? `slot_limit = ${EXCLUSIVE_LIMIT}`
              : `lease_token = NULL, preempt_of = NULL, slot_limit = ${EXCLUSIVE_LIMIT}
          WHERE NOT ${taken('l')}`
          }
          RETURNING l.slot
        ), locked AS MATERIALIZED (
          SELECT l.slot, l.lease_token IS NOT NULL AS was_held, l.owner AS previous_owner
          FROM ${lease} l, gate g
          WHERE l.target_id = $1 AND l.slot > ${WRITER_ROW_SLOT} AND NOT ${taken('l')}
          ORDER BY l.slot LIMIT 1
          FOR NO KEY UPDATE OF l SKIP LOCKED
        ), drawn AS MATERIALIZED (
          SELECT k.*, ${nextval} AS v FROM locked k
        ), won_old AS (
          UPDATE ${lease} AS l SET lease_token = $2::uuid, fencing_token = ${historyToken('x.v', 'l.fencing_token')}, owner = $3,
            priority = $4, lease_timeout_ms = $5, acquired_at = clock_timestamp(), updated_at = clock_timestamp(),
            hold_ms = $9, slot_limit = ${SHARED_LIMIT}, preempt_of = NULL
          FROM drawn x, (SELECT ${timeline} AS timeline) h
          WHERE l.target_id = $1 AND l.slot = x.slot
          RETURNING l.slot, l.fencing_token, x.was_held AS took_over,
            CASE WHEN x.was_held THEN x.previous_owner END AS previous_owner
        ), won_new AS (
          -- A row of a slot nobody used: one picked at random among the unused (concurrent readers rarely meet).
          INSERT INTO ${lease} AS l (${COLUMNS})
          SELECT $1, f.slot, $2::uuid, ${historyToken('f.v', highWaterToken(lease))}, $3, $4, $5, clock_timestamp(), clock_timestamp(), $9, ${SHARED_LIMIT}
          FROM (SELECT c.slot, ${nextval} AS v FROM (
              SELECT g AS slot FROM generate_series(${WRITER_ROW_SLOT + 1}, $11::int + ${WRITER_ROW_SLOT}) g, gate
              WHERE NOT EXISTS (SELECT 1 FROM locked) AND NOT EXISTS (SELECT 1 FROM key_rows r WHERE r.slot = g)
              ORDER BY random() LIMIT 1) c) f, (SELECT ${timeline} AS timeline) h
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
        ), woke AS (
          -- The next in line may be a reader too: it tries now (a writer is refused while this reader holds).
          SELECT ${notifyHeadSql('$10', 'h.waiter_id', '$1')} FROM (
            SELECT a.waiter_id FROM line a WHERE a.live AND a.waiter_id IS DISTINCT FROM $6::uuid
            ORDER BY a.eff DESC, a.seq LIMIT 1) h
          WHERE $10::text IS NOT NULL AND EXISTS (SELECT 1 FROM won)
        )
        ${answer('won', `(SELECT count(*) FROM woke)::int AS woke, ${runCap(capMs)} AS overran`)}`;
}

/** A writer's grant (its contract: `SemaphoreStore.tryAcquire` with `EXCLUSIVE_LIMIT`). */
export function exclusiveAcquireSql(n: LeaseObjectNames, timeline: string, capMs: number): string {
  const { lease, waiter, fencingSequence } = n;
  const nextval = `nextval(${sequenceLiteral(fencingSequence)})`;
  return `WITH ${keyAndLine(lease, waiter)}, open AS MATERIALIZED (
          -- The read-only pre-check: nobody holds the key (nor a hold's tail), no live waiter is ahead.
          SELECT (SELECT r.version FROM key_rows r WHERE r.slot = ${WRITER_ROW_SLOT}) AS seen
          FROM other o, ahead a
          WHERE o.held_limit IS NULL AND a.n = 0
            AND NOT EXISTS (SELECT 1 FROM key_rows r WHERE r.slot >= ${WRITER_ROW_SLOT} AND r.taken)
        ), gate AS MATERIALIZED (
          -- The writer's row, locked in its latest version: the one the snapshot read, or a reader came meanwhile.
          SELECT l.xmin::text AS version, l.lease_token IS NOT NULL AS was_held, l.owner AS previous_owner
          FROM ${lease} l, open o
          WHERE l.target_id = $1 AND l.slot = ${WRITER_ROW_SLOT} AND o.seen IS NOT NULL AND NOT ${taken('l')}
          FOR NO KEY UPDATE OF l
        ), fresh AS MATERIALIZED (
          SELECT 1 AS ok FROM open o
          WHERE o.seen IS NULL OR EXISTS (SELECT 1 FROM gate g WHERE g.version = o.seen)
        ), readers AS MATERIALIZED (
          -- Every reader's row that is not free, in its latest version (renewals and fences in flight waited for).
          SELECT l.slot, ${taken('l')} AS taken, l.owner FROM ${lease} l, fresh f
          WHERE l.target_id = $1 AND l.slot > ${WRITER_ROW_SLOT} AND (l.lease_token IS NOT NULL OR ${holding('l')})
          ORDER BY l.slot
          FOR NO KEY UPDATE OF l
        ), clear AS MATERIALIZED (
          SELECT 1 AS ok FROM fresh WHERE NOT EXISTS (SELECT 1 FROM readers r WHERE r.taken)
        ), drawn AS MATERIALIZED (
          -- After every lock: above every reader's token.
          SELECT g.*, ${nextval} AS v FROM gate g, clear c
        ), won_old AS (
          UPDATE ${lease} AS l SET lease_token = $2::uuid, fencing_token = ${historyToken('x.v', 'l.fencing_token')}, owner = $3,
            priority = $4, lease_timeout_ms = $5, acquired_at = clock_timestamp(), updated_at = clock_timestamp(),
            hold_ms = $9, slot_limit = ${EXCLUSIVE_LIMIT}, preempt_of = NULL
          FROM drawn x, (SELECT ${timeline} AS timeline) h
          WHERE l.target_id = $1 AND l.slot = ${WRITER_ROW_SLOT}
          RETURNING l.slot, l.fencing_token, x.was_held AS took_over,
            CASE WHEN x.was_held THEN x.previous_owner END AS previous_owner
        ), won_new AS (
          -- The key's first writer: its row is new (a reader granted meanwhile inserted it: nothing done, raced).
          INSERT INTO ${lease} AS l (${COLUMNS})
          SELECT $1, ${WRITER_ROW_SLOT}, $2::uuid, ${historyToken('f.v', highWaterToken(lease))}, $3, $4, $5, clock_timestamp(), clock_timestamp(), $9, ${EXCLUSIVE_LIMIT}
          FROM (SELECT ${nextval} AS v FROM open o, clear c WHERE o.seen IS NULL) f, (SELECT ${timeline} AS timeline) h
          ON CONFLICT (target_id, slot) DO NOTHING
          RETURNING l.slot, l.fencing_token
        ), won AS (
          SELECT slot, fencing_token, took_over, previous_owner FROM won_old
          UNION ALL
          SELECT slot, fencing_token, false, NULL FROM won_new
        ), taken_over AS (
          -- Expired readers' rows: taken over with the grant (their holders' renewals and fences find them lost).
          UPDATE ${lease} AS l SET lease_token = NULL FROM readers r
          WHERE l.target_id = $1 AND l.slot = r.slot AND NOT r.taken AND l.lease_token IS NOT NULL
            AND EXISTS (SELECT 1 FROM won)
          RETURNING r.owner
        ), granted AS (
          DELETE FROM ${waiter} w
          WHERE w.target_id = $1 AND EXISTS (SELECT 1 FROM line) AND EXISTS (SELECT 1 FROM won)
            AND (w.waiter_id = $6::uuid OR NOT ${liveWaiter('w')})
        ), result AS (
          SELECT w.slot, w.fencing_token,
            w.took_over OR EXISTS (SELECT 1 FROM taken_over) AS took_over,
            coalesce(w.previous_owner, (SELECT t.owner FROM taken_over t LIMIT 1)) AS previous_owner
          FROM won w
        )
        ${answer('result', `0 AS woke, ${runCap(capMs)} AS overran`)}`;
}
