/**
 * Prototype (issue 14, part 1): the set-based statements of client-side group commit, written so that part 2 can
 * move them into libs/lease/src/lease-store.ts with little change. Self-contained on purpose: the library is being
 * restructured while this is written, so the few helpers it needs (names, expiry predicates) are repeated here.
 *
 * One statement acquires any number of keys for any number of callers, one commit for all of them, with the rules
 * of the single acquire statement applied to every row:
 * - a key that is taken (a live holder, or the tail of a hold) or has a live waiter ahead of the caller is refused by
 *   a read-only pre-check: no row lock, no WAL, no transaction id for a batch that wins nothing;
 * - existing free rows (released, or expired: a takeover) are then locked in key order and without waiting
 *   (`FOR NO KEY UPDATE … SKIP LOCKED`), re-checked on their latest version, and only then updated: the fencing token
 *   is drawn in the UPDATE's SET, after the row lock, so it is larger than every earlier grant of the key;
 * - keys that never had a row are inserted in key order (`ON CONFLICT DO NOTHING`): no earlier grant exists;
 * - a duplicate key inside one batch has one candidate (the caller the no-barging rule would let through first);
 * - a row the batch could not lock at once (another transaction holds it) or that a concurrent statement took
 *   between the pre-check and the lock is reported `retry`: the caller goes the single path (`leanAcquireSql`), which
 *   may wait for the lock on its own, so one stalled row never stalls the whole batch;
 * - a granted waiter's own row, and the dead waiters of the won keys, are deleted in the same statement.
 */

export interface LeaseNames {
  schema: string;
  tableName: string;
  waiterTableName: string;
}

/** Quotes a validated identifier. */
export function quoteIdentifier(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/** The same names as the library's `leaseObjectNames` (lease-store.ts). */
export function objectNames(names: LeaseNames) {
  const q = (name: string) => `${quoteIdentifier(names.schema)}.${quoteIdentifier(name)}`;
  return {
    lease: q(names.tableName),
    waiter: q(names.waiterTableName),
    fencingSequence: q(`${names.tableName}_fencing_seq`),
    waiterSequence: q(`${names.waiterTableName}_seq`),
    channel: `${names.tableName}_wake`,
    /**
     * Head-only wake-ups (payload `<waiter id> <key>`) on a channel of their own: a key may itself look like that,
     * so the two payload kinds never share a channel; a process of an older version simply does not hear these
     * and falls back to its poll.
     */
    headChannel: `${names.tableName}_next`,
  };
}

const MS = `* interval '1 millisecond'`;

/** Lease row `alias` has a holder whose lease has not expired (database clock). */
export function live(alias: string): string {
  return `(${alias}.lease_token IS NOT NULL AND ${alias}.updated_at + ${alias}.lease_timeout_ms ${MS} > clock_timestamp())`;
}

/** The acquisition of lease row `alias` asked the target to stay taken until `hold_ms` after it. */
export function holding(alias: string): string {
  return `(${alias}.acquired_at + ${alias}.hold_ms ${MS} > clock_timestamp())`;
}

/** Taken: a live holder, or the tail of a hold. */
export function taken(alias: string): string {
  return `(${live(alias)} OR ${holding(alias)})`;
}

/** A waiter row whose heartbeat is recent enough. */
export function liveWaiter(alias: string): string {
  return `(${alias}.heartbeat_at + ${alias}.timeout_ms ${MS} > clock_timestamp())`;
}

/** Effective priority of waiter row `alias` (aging when `agingParameter` is not NULL), as in the library. */
export function aged(alias: string, agingParameter: string): string {
  return `(${alias}.priority::bigint + CASE WHEN ${agingParameter}::bigint IS NULL THEN 0
    ELSE floor(extract(epoch FROM statement_timestamp() - ${alias}.queued_at) * 1000 / ${agingParameter}::bigint)::bigint END)`;
}

/**
 * How a won row's fencing token is made from a sequence value drawn for that row.
 * - `plain`: the value itself (the layout on main).
 * - `timeline`: `(timeline << 40) | value`, the layout of issue 15. In a set-based statement the value must be drawn
 *   at the top level of the row's expression: an uncorrelated sub-select such as `(SELECT nextval(…))` is an InitPlan,
 *   evaluated ONCE per statement, and would give every row of a batch the same token. The timeline is read once per
 *   statement (a CTE), which is what we want; the 40-bit bound is the sequence's MAXVALUE (2^40 − 1), so `nextval`
 *   itself refuses to overflow into the timeline bits.
 */
export type TokenLayout = 'plain' | 'timeline';

const TIMELINE = `('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint`;

function token(layout: TokenLayout, sequence: string): string {
  const next = `nextval('${sequence.replace(/'/g, "''")}')`;
  return layout === 'plain' ? next : `((SELECT timeline FROM history) << 40) | ${next}`;
}

/** What each caller of an acquire batch gets back, by its position in the batch (1-based `i`). */
export interface BatchAcquireRow {
  i: number;
  outcome: 'won' | 'refused' | 'retry';
  fencing_token: string | null;
  took_over: boolean | null;
  previous_owner: string | null;
  /** Refused with no live holder, only a hold's tail in the way: it ends in this many ms (no NOTIFY marks it). */
  hold_left_ms: number | null;
}

/**
 * The callers of a batch travel as ONE jsonb parameter (an array of objects), not as parallel arrays, and the input
 * is filtered by a range the planner cannot judge. Both are about the plan cache:
 * - PostgreSQL keeps a generic plan for a prepared statement only when it costs no more than the custom plans.
 *   `unnest($1::text[])` is estimated at the real array length in a custom plan (1 row for a batch of one) but at
 *   10 rows in the generic plan, so with arrays every call of a lone caller is planned afresh (measured: 1.5 ms of
 *   planning for 0.5 ms of execution). `jsonb_to_recordset` has no such estimate: custom and generic plans cost the
 *   same and the generic plan is kept after the fifth call, as for the library's scalar statements.
 * - A generic plan is made once per connection, often while the lease table is still small, and kept until the
 *   table is analyzed again. Estimated at 100 input rows (jsonb_to_recordset's default), it hashes the whole lease
 *   table (seq scan, hash join) instead of probing the primary key — measured: 500 buffers and 16 ms per call once
 *   the table had 20,000 rows. `i BETWEEN 1 AND 100000` (always true) is estimated at 0.5 % selectivity, i.e. one
 *   input row, in custom and generic plans alike: the plan probes the primary key per caller whatever the table
 *   size was when it was made.
 */
const ONE_ROW_ESTIMATE = 'WHERE r.i BETWEEN 1 AND 100000';

export interface AcquireBatchItem {
  i: number;
  target_id: string;
  lease_token: string;
  priority: number;
  waiter_id: string | null;
  /** bigint as a decimal string */
  waiter_seq: string | null;
  hold_ms: number;
}

/**
 * The batch acquire. Parameters: $1 jsonb array of `AcquireBatchItem` (i = 1 … n), $2 owner, $3 lease timeout ms,
 * $4 aging interval ms (NULL: off). One row per caller in the result, ordered by i.
 * A caller reported `retry` goes alone through `leanAcquireSql`, which waits for the row lock as the library does.
 */
export function batchAcquireSql(names: LeaseNames, layout: TokenLayout = 'plain'): string {
  const { lease, waiter, fencingSequence } = objectNames(names);
  return `WITH ${layout === 'timeline' ? `history AS MATERIALIZED (SELECT ${TIMELINE} AS timeline), ` : ''}req AS (
      SELECT * FROM jsonb_to_recordset($1::jsonb)
        AS r(i int, target_id text, lease_token uuid, priority int, waiter_id uuid, waiter_seq bigint, hold_ms int)
      ${ONE_ROW_ESTIMATE}
    ), mine AS (
      -- Each caller's effective priority: a queued waiter ages from when it first queued; a newcomer has waited 0.
      SELECT r.*, coalesce((SELECT ${aged('me', '$4')} FROM ${waiter} me
        WHERE me.target_id = r.target_id AND me.waiter_id = r.waiter_id), r.priority::bigint) AS eff
      FROM req r
    ), cand AS (
      -- One candidate per key: the caller the no-barging rule would let through first (if it is refused, so is
      -- every other caller of the key in this batch).
      SELECT DISTINCT ON (m.target_id) m.* FROM mine m
      ORDER BY m.target_id, m.eff DESC, m.waiter_seq NULLS LAST, m.i
    ), open AS MATERIALIZED (
      -- Read-only pre-check on the statement's snapshot: refused keys take no lock and write nothing.
      SELECT c.*, EXISTS (SELECT 1 FROM ${lease} l WHERE l.target_id = c.target_id) AS has_row
      FROM cand c
      WHERE NOT EXISTS (SELECT 1 FROM ${lease} l WHERE l.target_id = c.target_id AND ${taken('l')})
        AND NOT EXISTS (
          SELECT 1 FROM ${waiter} w
          WHERE w.target_id = c.target_id AND w.waiter_id IS DISTINCT FROM c.waiter_id AND ${liveWaiter('w')}
            AND (${aged('w', '$4')} > c.eff
              OR (${aged('w', '$4')} = c.eff AND w.seq < coalesce(c.waiter_seq, 9223372036854775807))))
    ), locked AS MATERIALIZED (
      -- Existing rows: locked in key order, never waited for, re-checked on their latest version under the lock.
      SELECT l.target_id, l.lease_token IS NOT NULL AS was_held, l.owner AS previous_owner
      FROM ${lease} l JOIN open o ON o.target_id = l.target_id
      WHERE o.has_row AND NOT ${taken('l')}
      ORDER BY l.target_id
      FOR NO KEY UPDATE OF l SKIP LOCKED
    ), won_old AS (
      -- The token is drawn here, per row, after the row lock: larger than every earlier grant of the key.
      UPDATE ${lease} AS l SET lease_token = o.lease_token, fencing_token = ${token(layout, fencingSequence)},
        owner = $2, priority = o.priority, lease_timeout_ms = $3, acquired_at = clock_timestamp(),
        updated_at = clock_timestamp(), hold_ms = o.hold_ms
      FROM locked k JOIN open o ON o.target_id = k.target_id
      WHERE l.target_id = k.target_id
      RETURNING l.target_id, l.fencing_token, k.was_held, k.previous_owner
    ), won_new AS (
      -- First-ever acquisitions of a key, in key order; a concurrent first insert wins and we report retry.
      INSERT INTO ${lease} AS l
        (target_id, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at, updated_at, hold_ms)
      SELECT o.target_id, o.lease_token, ${token(layout, fencingSequence)}, $2, o.priority, $3,
        clock_timestamp(), clock_timestamp(), o.hold_ms
      FROM open o WHERE NOT o.has_row
      ORDER BY o.target_id
      ON CONFLICT (target_id) DO NOTHING
      RETURNING l.target_id, l.fencing_token
    ), won AS (
      SELECT target_id, fencing_token, was_held AS took_over, CASE WHEN was_held THEN previous_owner END AS previous_owner
      FROM won_old
      UNION ALL
      SELECT target_id, fencing_token, false, NULL FROM won_new
    ), granted AS (
      -- A granted waiter's own row goes with the grant (always: a left-over row would block the line).
      DELETE FROM ${waiter} w USING won, open o
      WHERE w.target_id = won.target_id AND o.target_id = won.target_id AND w.waiter_id = o.waiter_id
      RETURNING w.waiter_id
    ), dead AS (
      -- Dead waiters of the won keys were skipped; no live waiter may be left to evict them. Never waited for.
      DELETE FROM ${waiter} w USING (
        SELECT d.target_id, d.waiter_id FROM ${waiter} d JOIN won ON d.target_id = won.target_id
        WHERE NOT ${liveWaiter('d')} AND d.waiter_id NOT IN (SELECT o.waiter_id FROM open o WHERE o.waiter_id IS NOT NULL)
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
        FROM ${lease} l WHERE l.target_id = m.target_id AND NOT ${live('l')} AND ${holding('l')}) END AS hold_left_ms
    FROM mine m
    LEFT JOIN open o ON o.target_id = m.target_id
    LEFT JOIN won w ON w.target_id = m.target_id AND o.i = m.i
    ORDER BY m.i`;
}

/**
 * The lean single acquire: what a batch of one sends (no jsonb, scalar parameters, like the library's statement),
 * with the fast path of an uncontended key in mind. Differences from the library's acquire statement on main:
 * - the target's waiter rows are read once (`line`), and the own-row / dead-waiter DELETE runs only when the target
 *   has any waiter row at all (one index probe less on the common path);
 * - the previous owner is read only for a takeover (the INSERT and the plain re-acquisition skip that probe);
 * - a newcomer's effective priority is its priority: no probe for its (non-existent) waiter row.
 * Parameters: $1 key, $2 lease token, $3 owner, $4 priority, $5 lease timeout ms, $6 waiter id (NULL: newcomer),
 * $7 waiter seq, $8 aging interval ms (NULL: off), $9 hold ms. One row: fencing token (NULL: refused), took over,
 * previous owner, hold left ms.
 */
export function leanAcquireSql(names: LeaseNames, layout: TokenLayout = 'plain'): string {
  const { lease, waiter, fencingSequence } = objectNames(names);
  return `WITH ${layout === 'timeline' ? `history AS MATERIALIZED (SELECT ${TIMELINE} AS timeline), ` : ''}line AS MATERIALIZED (
      SELECT w.waiter_id, w.seq, ${aged('w', '$8')} AS eff, ${liveWaiter('w')} AS live FROM ${waiter} w WHERE w.target_id = $1
    ), me AS (
      SELECT CASE WHEN $6::uuid IS NULL THEN $4::bigint
        ELSE coalesce((SELECT eff FROM line WHERE waiter_id = $6::uuid), $4::bigint) END AS eff
    ), won AS (
      INSERT INTO ${lease} AS l
        (target_id, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at, updated_at, hold_ms)
      SELECT $1, $2::uuid, ${token(layout, fencingSequence)}, $3, $4, $5, clock_timestamp(), clock_timestamp(), $9
      WHERE NOT EXISTS (SELECT 1 FROM ${lease} h WHERE h.target_id = $1 AND ${taken('h')})
        AND NOT EXISTS (SELECT 1 FROM line a, me WHERE a.live AND a.waiter_id IS DISTINCT FROM $6::uuid
          AND (a.eff > me.eff OR (a.eff = me.eff AND a.seq < coalesce($7::bigint, 9223372036854775807))))
      ON CONFLICT (target_id) DO UPDATE SET
        lease_token = EXCLUDED.lease_token, fencing_token = ${token(layout, fencingSequence)}, owner = EXCLUDED.owner,
        priority = EXCLUDED.priority, lease_timeout_ms = EXCLUDED.lease_timeout_ms,
        acquired_at = EXCLUDED.acquired_at, updated_at = EXCLUDED.updated_at, hold_ms = EXCLUDED.hold_ms
      WHERE NOT ${taken('l')}
      RETURNING l.fencing_token, (l.xmax <> 0) AS updated
    ), granted AS (
      DELETE FROM ${waiter} w WHERE w.target_id = $1 AND EXISTS (SELECT 1 FROM line) AND EXISTS (SELECT 1 FROM won)
        AND (w.waiter_id = $6::uuid OR NOT ${liveWaiter('w')})
    )
    SELECT won.fencing_token::text AS fencing_token,
      CASE WHEN won.updated THEN (SELECT p.lease_token IS NOT NULL FROM ${lease} p WHERE p.target_id = $1) END
        AS took_over,
      CASE WHEN won.updated THEN (SELECT p.owner FROM ${lease} p WHERE p.target_id = $1 AND p.lease_token IS NOT NULL)
        END AS previous_owner,
      NULL::float8 AS hold_left_ms
    FROM won
    UNION ALL
    SELECT NULL, NULL, NULL, (extract(epoch FROM l.acquired_at + l.hold_ms ${MS} - clock_timestamp()) * 1000)::float8
    FROM ${lease} l
    WHERE l.target_id = $1 AND NOT EXISTS (SELECT 1 FROM won) AND NOT ${live('l')} AND ${holding('l')}`;
}

/**
 * The lean single release (the library's, plus head-only): $1 key, $2 lease token, $3 channel (NULL: no NOTIFY),
 * $4 asyncReleaseCommits, $5 aging interval ms. One row: released, the next waiter.
 */
export function leanReleaseSql(names: LeaseNames, headOnly: boolean): string {
  const { lease, waiter } = objectNames(names);
  return `WITH gone AS (
      UPDATE ${lease} SET lease_token = NULL WHERE target_id = $1 AND lease_token = $2::uuid RETURNING target_id
    ), head AS (
      SELECT (SELECT w.waiter_id FROM ${waiter} w WHERE w.target_id = $1 AND ${liveWaiter('w')}
        ORDER BY ${aged('w', '$5')} DESC, w.seq LIMIT 1) AS waiter_id
      FROM gone
    ), woke AS (
      SELECT pg_notify($3, ${headOnly ? `h.waiter_id::text || ' ' || $1` : '$1'}) FROM head h
      WHERE $3::text IS NOT NULL AND h.waiter_id IS NOT NULL
    )
    SELECT EXISTS (SELECT 1 FROM gone) AS released, (SELECT waiter_id::text FROM head) AS next_waiter,
      (SELECT count(*) FROM woke) AS woke,
      CASE WHEN $4::boolean THEN set_config('synchronous_commit', 'off', true) END AS async_commit`;
}

/** What each caller of a release batch gets back, by position. */
export interface BatchReleaseRow {
  i: number;
  /** released; gone (not ours any more: lost, taken over, or released before); retry (row locked: single path). */
  outcome: 'released' | 'gone' | 'retry';
  /** Head-only handoff: the waiter that should attempt next, when the key has a live waiter. */
  next_waiter: string | null;
}

/**
 * The batch soft release (rows kept, token cleared). Parameters: $1 jsonb array of `{ i, target_id, lease_token }`,
 * $2 NOTIFY channel (NULL: no NOTIFY), $3 asyncReleaseCommits, $4 aging interval ms (NULL: off). With `headOnly`,
 * $2 is the head channel and the payload names the next waiter (`<waiter id> <key>`), so only its process attempts; otherwise
 * the payload is the key (every waiter of the key wakes).
 */
export function batchReleaseSql(names: LeaseNames, headOnly: boolean): string {
  const { lease, waiter } = objectNames(names);
  return `WITH req AS (
      SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(i int, target_id text, lease_token uuid) ${ONE_ROW_ESTIMATE}
    ), pairs AS (
      SELECT DISTINCT target_id, lease_token FROM req
    ), locked AS MATERIALIZED (
      SELECT l.target_id, l.lease_token FROM ${lease} l
      JOIN pairs p ON l.target_id = p.target_id AND l.lease_token = p.lease_token
      ORDER BY l.target_id
      FOR NO KEY UPDATE OF l SKIP LOCKED
    ), gone AS (
      UPDATE ${lease} l SET lease_token = NULL FROM locked k
      WHERE l.target_id = k.target_id AND l.lease_token = k.lease_token
      RETURNING l.target_id
    ), head AS (
      -- The waiter the next acquire statement would let through: highest effective priority, then first queued.
      SELECT g.target_id, (SELECT w.waiter_id FROM ${waiter} w WHERE w.target_id = g.target_id AND ${liveWaiter('w')}
        ORDER BY ${aged('w', '$4')} DESC, w.seq LIMIT 1) AS waiter_id
      FROM (SELECT DISTINCT target_id FROM gone) g
    ), woke AS (
      SELECT pg_notify($2, ${headOnly ? `h.waiter_id::text || ' ' || h.target_id` : 'h.target_id'}) FROM head h
      WHERE $2::text IS NOT NULL AND h.waiter_id IS NOT NULL
    )
    SELECT r.i::int AS i,
      CASE WHEN EXISTS (SELECT 1 FROM gone g WHERE g.target_id = r.target_id) THEN 'released'
        WHEN EXISTS (SELECT 1 FROM ${lease} l WHERE l.target_id = r.target_id AND l.lease_token = r.lease_token)
          THEN 'retry'
        ELSE 'gone' END AS outcome,
      (SELECT h.waiter_id::text FROM head h WHERE h.target_id = r.target_id) AS next_waiter,
      (SELECT count(*) FROM woke) AS woke,
      CASE WHEN $3::boolean THEN set_config('synchronous_commit', 'off', true) END AS async_commit
    FROM req r ORDER BY r.i`;
}

/**
 * Queues a waiter (the library's enqueue statement, unchanged): $1 key, $2 waiter id, $3 owner, $4 priority,
 * $5 waiter timeout ms, $6 first-queued time (re-queue), $7 seq (re-queue), $8 maxWaitersPerTarget.
 */
export function enqueueSql(names: LeaseNames): string {
  const { waiter, waiterSequence } = objectNames(names);
  return `INSERT INTO ${waiter} AS w (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
    SELECT $1, $2::uuid, $3, $4, $5, coalesce($6::timestamptz, clock_timestamp()),
      coalesce($7::bigint, nextval('${waiterSequence.replace(/'/g, "''")}')), clock_timestamp()
    WHERE (SELECT count(*) FROM ${waiter} c WHERE c.target_id = $1 AND ${liveWaiter('c')}) < $8
    ON CONFLICT (target_id, waiter_id) DO UPDATE SET heartbeat_at = clock_timestamp()
    RETURNING w.seq::text AS seq, w.queued_at`;
}

/**
 * Removes a waiter that gives up: $1 key, $2 waiter id, $3 channel (NULL: no NOTIFY), $4 aging interval ms. When the
 * target is free, the line moved: with `headOnly` the NOTIFY names the new head waiter only.
 */
export function dequeueSql(names: LeaseNames, headOnly: boolean): string {
  const { lease, waiter } = objectNames(names);
  return `WITH gone AS (
      DELETE FROM ${waiter} WHERE target_id = $1 AND waiter_id = $2::uuid RETURNING target_id
    ), head AS (
      SELECT g.target_id, (SELECT w.waiter_id FROM ${waiter} w
        WHERE w.target_id = g.target_id AND w.waiter_id <> $2::uuid AND ${liveWaiter('w')}
        ORDER BY ${aged('w', '$4')} DESC, w.seq LIMIT 1) AS waiter_id
      FROM gone g
      WHERE NOT EXISTS (SELECT 1 FROM ${lease} l WHERE l.target_id = g.target_id AND ${taken('l')})
    )
    SELECT pg_notify($3, ${headOnly ? `h.waiter_id::text || ' ' || h.target_id` : 'h.target_id'}) FROM head h
    WHERE $3::text IS NOT NULL AND h.waiter_id IS NOT NULL`;
}

/** A head-only NOTIFY payload (`headChannel`): `<waiter id> <key>`. */
export function parseHeadPayload(payload: string): { waiterId: string; targetKey: string } | undefined {
  const match = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}) (.+)$/s.exec(payload);
  return match ? { waiterId: match[1], targetKey: match[2] } : undefined;
}
