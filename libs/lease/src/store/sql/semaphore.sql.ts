/**
 * The statements of semaphores (`limit` above 1; docs/semaphores.md): the acquisition of a slot,
 * and the release of one (waking as many of the key's waiters as slots are free). Slot `i` of a key is its lease row
 * `(key, i + 1)` (see options/slot-limits.ts), an ordinary lease row, so renewals, fenced transactions and `list()`
 * need no statement of their own; each records the limit it was granted under (`slot_limit`). Waiters queue in the
 * key's own line (the waiter table under the key), with the single holder's rules.
 */
import { notifyHeadSql } from '../../database/head-payload.js';
import { aged, holding, live, liveWaiter, MS, runCap, taken, type LeaseObjectNames } from './fragments.js';
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
