/**
 * Every SQL statement of the library, in one place. Parameters are always bound; the only text spliced into SQL
 * are the schema/table/sequence names, validated by `resolveLeaseOptions` and quoted here once.
 *
 * Expiry is always judged by PostgreSQL's clock (`clock_timestamp()`), against the timeout the holder (or waiter)
 * wrote into its own row, so processes with different settings still agree on when a lease is free.
 */
import { createHash } from 'node:crypto';
import type pg from 'pg';
import type { EntityManager, QueryRunner } from 'typeorm';
import { LeaseConfigError, LeaseUnavailableError } from './errors.js';
import { faultSwitches } from './fault-switches.js';
import { GroupCommit, isStatementError, type ItemOutcome } from './group-commit.js';
import type { ResolvedLeaseOptions } from './lease.options.js';
import { leaseObjectNames, schemaStatements } from './lease-schema.js';

/** The part of a `pg` pool (or client) the store needs. */
export interface Queryable {
  query<R extends pg.QueryResultRow = any>(
    config: pg.QueryConfig & { query_timeout?: number },
  ): Promise<pg.QueryResult<R>>;
}

/** A pool: queries, and a connection of its own when the moment a statement is sent matters. */
export interface PoolLike extends Queryable {
  connect(): Promise<pg.PoolClient>;
}

/** Runs a sequence of statements on one session; if the work fails, the session is not reused. */
export interface SessionSource {
  withSession<T>(work: (session: Queryable) => Promise<T>): Promise<T>;
  /**
   * Set when every session of this source is bounded on the server by session settings (statement_timeout,
   * lock_timeout, idle_in_transaction_session_timeout of this many ms) and defaults to READ COMMITTED: a connection of
   * the library's own, outside a transaction pooler. A single statement there needs no transaction framing.
   */
  readonly boundedMs?: number;
}

/** Sessions from a pool: a client is checked out for the work and released as broken if the work fails. */
function poolSessions(pool: PoolLike): SessionSource {
  return {
    async withSession(work) {
      const client = await pool.connect();
      let failed: Error | undefined;
      const onError = (error: Error) => (failed = error);
      client.on('error', onError);
      try {
        return await work(client);
      } catch (error) {
        failed ??= error as Error;
        throw error;
      } finally {
        client.off('error', onError);
        client.release(failed);
      }
    },
  };
}

/**
 * SQLSTATEs after which one of our single statements can simply run again: PostgreSQL rolled it back whole. Under
 * `default_transaction_isolation = serializable` (or repeatable read) concurrent acquisitions of one key raise
 * 40001; the statements are correct under READ COMMITTED's row locks, so a fresh attempt is all they need.
 */
const RETRYABLE_SQLSTATES = new Set(['40001', '40P01']);
const MAX_ATTEMPTS = 10;

/** A serialization failure or deadlock: the statement (or transaction) was rolled back whole. */
export function isSerializationFailure(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && RETRYABLE_SQLSTATES.has(code);
}

/** Runs `statement` again (a few times, with a short jittered pause) when it fails with a serialization failure. */
async function retryingSerializationFailures<T>(statement: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await statement();
    } catch (error) {
      if (attempt >= MAX_ATTEMPTS || !isSerializationFailure(error)) throw error;
      if (attempt > 1) await new Promise((resolve) => setTimeout(resolve, Math.random() * 5 * attempt));
    }
  }
}

/** What one batched renewal found, by lease token (tokens in none of the sets are lost: another token, or no row). */
export interface RenewResult {
  /** Renewed. */
  kept: Set<string>;
  /** Still ours and live, but the row is locked (by a fenced transaction of ours, say): neither renewed nor lost. */
  skipped: Set<string>;
  /** Still carrying our token but expired by the database clock: never revived. */
  expired: Set<string>;
  /**
   * Acquired under another history of the database than the server now has (a failover): not renewed, lost. Set
   * only when the renewal was given the leases' history (see `LeaseStore.renew`).
   */
  failover?: Set<string>;
  /** What the server said of its history, when it was asked. */
  history?: ServerHistory;
}

/**
 * Where a server stands in the history of its data: a promoted standby starts a new timeline, and a server in
 * recovery (a standby) can neither grant nor renew. Read by any role on PostgreSQL ≥ 15.
 */
export interface ServerHistory {
  /** A standby, or a server still replaying WAL: read-only. */
  recovery: boolean;
  /** The timeline of the server's WAL (null in recovery, where the current WAL position is not defined). */
  timeline: bigint | null;
  /**
   * `system_identifier` of `pg_control_system()` (set by initdb; the same on a primary and its standbys; another
   * value means another database cluster). Null where the role may not call the function.
   */
  systemId: string | null;
}

/** What a renewal compares with the server's history (see `LeaseStore.renew`). */
export interface LeaseHistory {
  /** The leases' fencing tokens, in the order of the lease tokens: each carries the timeline it was drawn in. */
  fencingTokens: bigint[];
  /** The system identifier the leases were acquired under (null: unknown, not compared). */
  systemId: string | null;
}

/** Bits of a fencing token below the timeline: `token = (timeline << 40) | sequence value`. */
const FENCING_SEQUENCE_BITS = 40n;

/** The timeline of the server history a fencing token was drawn in (0 for tokens of versions before the layout). */
export function timelineOf(fencingToken: bigint): bigint {
  return fencingToken >> FENCING_SEQUENCE_BITS;
}

/**
 * The timeline of the server's WAL: the first 8 hex digits of the current WAL file's name. Any role may call both
 * functions; a promoted standby reports its new timeline at once (`pg_control_checkpoint()` lags until the next
 * checkpoint). Fails in recovery.
 */
const TIMELINE = `('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint`;

/**
 * The server's history, in one row. `pg_control_system()` is executable by PUBLIC on a stock server, but a managed
 * service may revoke it, and a function's right is checked when the statement starts, whichever branch runs: so the
 * statement reads the system identifier only where the role may (see `LeaseStore.systemIdReadable`); elsewhere it is
 * null, and the timeline and the recovery state decide alone.
 */
function serverHistorySql(readSystemId: boolean): string {
  const systemId = readSystemId ? '(SELECT system_identifier FROM pg_catalog.pg_control_system())::text' : 'NULL::text';
  return `SELECT pg_is_in_recovery() AS recovery,
    CASE WHEN NOT pg_is_in_recovery() THEN ${TIMELINE}::text END AS timeline, ${systemId} AS system_id`;
}

/** A statement refused because the role may not call `pg_control_system()`. */
function systemIdRefused(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: string; message?: string };
  return code === '42501' && /pg_control_system/.test(message ?? '');
}

function serverHistory(row: { recovery: boolean; timeline: string | null; system_id: string | null }): ServerHistory {
  const timeline = row.timeline === null ? null : BigInt(row.timeline);
  return { recovery: row.recovery, timeline, systemId: row.system_id };
}

/**
 * A number drawn from `sequence` that orders across failovers: `(timeline << 40) | nextval`. After an asynchronous
 * failover the sequence resumes from what the standby had received, so its plain values can go back; the promoted
 * server's timeline is larger, so these numbers never do. Values of versions before this layout (< 2⁴⁰) stay below
 * every new one. The sequence is not reset by a failover: it has 2⁴⁰ values for the life of the table. A value
 * that would not fit its 40 bits (or a timeline past 2²³, which would overflow a bigint) gives NULL, which the
 * column's NOT NULL refuses: nothing is written and the caller reports it (`exhausted`), rather than a number that
 * spills into the timeline bits. One expression for the fencing token and the waiter order, so both carry it.
 * `sequence` is a quoted name, spliced as a string literal.
 */
function historyOrdered(sequence: string): string {
  return `(SELECT ${historyToken('s.v')}
    FROM (SELECT nextval(${sequenceLiteral(sequence)}) AS v) s, (SELECT ${TIMELINE} AS timeline) h)`;
}

/** A quoted sequence name as the string literal `nextval` takes. */
function sequenceLiteral(sequence: string): string {
  return `'${sequence.replace(/'/g, "''")}'`;
}

/** The error of a statement that drew a number past the 40 bits of `historyOrdered` for `column`. */
function exhausted(error: unknown, column: string, sequence: string): LeaseConfigError | undefined {
  const { code, column: failed } = (error ?? {}) as { code?: string; column?: string };
  if (code !== '23502' || failed !== column) return undefined;
  return new LeaseConfigError(
    `The sequence ${sequence} has passed 2^40 (or the server's timeline 2^23): nest-pg-lease refuses to hand out ` +
      'numbers that would overflow into the timeline bits of its fencing tokens, and nothing was written. Tokens ' +
      'cannot grow further in these tables: move to new ones (tableName, waiterTableName) and let downstream systems ' +
      'that compare fencing tokens start afresh; see the README section "Failover" (fencing token layout)',
    { cause: error },
  );
}

/**
 * A write refused because the server accepts no writes: a standby in recovery (the application reached a replica,
 * or a failover is under way), or a server set read-only.
 */
function readOnly(error: unknown, targetKey: string): LeaseUnavailableError | undefined {
  const { code, message } = (error ?? {}) as { code?: string; message?: string };
  const recovery = code === '55000' && /recovery is in progress/.test(message ?? '');
  if (code !== '25006' && !recovery) return undefined;
  return new LeaseUnavailableError(targetKey, String(message), { cause: error });
}

// The DDL and the names of the objects live in lease-schema.ts, with the entities they must match.
export { quoteIdentifier, type LeaseNames, leaseObjectNames, grantStatements } from './lease-schema.js';

export interface AcquireRequest {
  targetKey: string;
  leaseToken: string;
  priority: number;
  /** The caller's waiter row, when it is queued: it may pass only waiters queued behind it. */
  waiterId?: string;
  waiterSeq?: bigint;
  /** The target stays taken until this long after the acquisition, even once released (0: no hold). */
  holdMs: number;
  /**
   * Queue the caller under this new waiter id when it is refused, in the same statement (the first attempt of a
   * call that will wait). Such an attempt is never batched.
   */
  queueAs?: {
    waiterId: string;
    /** The row is born with this long to live (≤ waiterTimeoutMs), and the statement is given up after it. */
    boundMs: number;
  };
}

/** One caller of a release batch. */
interface ReleaseItem {
  targetKey: string;
  leaseToken: string;
  timeoutMs: number;
}

export interface AcquiredRow {
  fencingToken: bigint;
  /** Monotonic time the statement was sent (after waiting for a pooled connection): the lease counts from here. */
  sentAt: number;
  /** The row existed (expired) and was taken over, rather than inserted fresh. */
  tookOver: boolean;
  previousOwner: string | null;
}

/** A refused attempt; `holdLeftMs` is set when the target is free but for the hold of its last acquisition. */
export interface Refusal {
  readonly refused: true;
  readonly holdLeftMs: number | null;
  /** With `queueAs`: the caller's place in line, or null when the line was full (`maxWaitersPerTarget`). */
  readonly place?: WaiterPlace | null;
}

export interface WaiterPlace {
  seq: bigint;
  queuedAt: Date;
}

export interface SnapshotRow {
  state: 'held' | 'waiting';
  target_id: string;
  owner: string;
  priority: number;
  effective_priority: string;
  fencing_token: string | null;
  seq: string | null;
  age_ms: number;
  since_heartbeat_ms: number;
  timeout_ms: number;
}

const MS = `* interval '1 millisecond'`;

/** Lease row `alias` has a holder whose lease has not expired (database clock). */
function live(alias: string): string {
  return `(${alias}.lease_token IS NOT NULL
    AND ${alias}.updated_at + ${alias}.lease_timeout_ms ${MS} > clock_timestamp())`;
}

/** The acquisition of lease row `alias` asked the target to stay taken until `hold_ms` after it (holdAtLeastMs). */
function holding(alias: string): string {
  return `(${alias}.acquired_at + ${alias}.hold_ms ${MS} > clock_timestamp())`;
}

/**
 * The target of lease row `alias` is taken: by a live holder, or by the tail of a hold (released or not). A released
 * or expired row past its hold is free.
 */
function taken(alias: string): string {
  return `(${live(alias)} OR ${holding(alias)})`;
}

/**
 * Effective priority of a waiter: its priority, plus one per `agingIntervalMs` waited since it first queued when
 * aging is on (the parameter is NULL when it is off). Database clock, one instant per statement, so every row of a
 * statement ages consistently.
 */
function aged(queuedAt: string, agingParameter: string): string {
  const alias = queuedAt.split('.')[0];
  return `(${alias}.priority::bigint + CASE WHEN ${agingParameter}::bigint IS NULL THEN 0
    ELSE floor(extract(epoch FROM statement_timestamp() - ${queuedAt}) * 1000 / ${agingParameter}::bigint)::bigint END)`;
}

/** A waiter row whose heartbeat is recent enough. */
function liveWaiter(alias: string): string {
  return `(${alias}.heartbeat_at + ${alias}.timeout_ms ${MS} > clock_timestamp())`;
}

/**
 * The first `heartbeat_at` of a queued row: it lives `bound` ms (≤ its `timeout`) from when the statement reached the
 * server, so a row landing after its caller gave up on the statement (given up after `bound`) is born dead.
 */
function bornWithin(timeout: string, bound: string): string {
  return `statement_timestamp() - (${timeout} - ${bound}::int) ${MS}`;
}

/**
 * `historyOrdered` for the rows of a set-based statement: `v`, a sequence value drawn for the row at the top level of
 * a row source (never in a sub-select: an uncorrelated one is evaluated once per statement and would give every row
 * of a batch the same number), combined with the timeline of the statement's `history h`.
 */
function historyToken(v: string): string {
  const limit = 1n << FENCING_SEQUENCE_BITS;
  return `CASE WHEN ${v} BETWEEN 0 AND ${limit - 1n} AND h.timeline < ${1n << (63n - FENCING_SEQUENCE_BITS)}
      THEN (h.timeline << ${FENCING_SEQUENCE_BITS}) | ${v} END`;
}

/**
 * A batch's callers travel as ONE jsonb parameter, filtered by a range the planner cannot judge; both are about the
 * plan cache (measured by the prototype of issue 14 part 1). `unnest($1::text[])` is estimated at the array's length
 * in a custom plan but at 10 rows in the generic one, so a prepared statement would be planned afresh on every call
 * (1.5 ms of planning for 0.5 ms of execution); `jsonb_to_recordset` costs the same in both and the generic plan is
 * kept. And a generic plan made while the table was small must still probe the primary key per caller rather than
 * hash the whole table: `i BETWEEN 1 AND 100000` (always true) is estimated at one row in every plan.
 */
const ONE_ROW_ESTIMATE = 'WHERE r.i BETWEEN 1 AND 100000';

/** One caller of an acquire batch. */
interface AcquireBatchItem {
  i: number;
  target_id: string;
  lease_token: string;
  priority: number;
  waiter_id: string | null;
  /** bigint as a decimal string */
  waiter_seq: string | null;
  hold_ms: number;
}

/** What each caller of an acquire batch gets back, by its position `i` (1-based). */
interface AcquireBatchRow {
  i: number;
  /** `retry`: the row was locked by another transaction, or taken between the pre-check and the lock. */
  outcome: 'won' | 'refused' | 'retry';
  fencing_token: string | null;
  took_over: boolean | null;
  previous_owner: string | null;
  hold_left_ms: number | null;
}

/**
 * The single acquisition statement (its contract: `LeaseStore.tryAcquire`). Parameters: $1 target, $2 lease token,
 * $3 owner, $4 priority, $5 lease timeout, $6 the caller's waiter id, $7 its waiter seq, $8 aging interval, $9 hold.
 *
 * With `queue` (the first attempt of a call that will wait in line), a refused caller is queued by the same
 * statement (see `LeaseStore.enqueue` for the row's rules): $10 its new waiter id, $11 waiter timeout, $12 the bound of
 * the statement (a row landing after it is born dead), $13 maxWaitersPerTarget. Its place comes back in `seq`,
 * `queued_at` (null when the line is full).
 */
function singleAcquireSql(n: ReturnType<typeof leaseObjectNames>, queue: boolean): string {
  const { lease, waiter, fencingSequence, waiterSequence } = n;
  const token = historyOrdered(fencingSequence);
  const queued = queue
    ? `INSERT INTO ${waiter} (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
          SELECT $1, $10::uuid, $3, $4, $11, clock_timestamp(), ${historyOrdered(waiterSequence)},
            ${bornWithin('$11', '$12')}
          WHERE NOT EXISTS (SELECT 1 FROM won) AND (SELECT count(*) FROM line WHERE line.live) < $13
          RETURNING seq, queued_at`
    : 'SELECT NULL::bigint AS seq, NULL::timestamptz AS queued_at WHERE false';
  return `WITH held AS (
          SELECT 1 FROM ${lease} l WHERE l.target_id = $1 AND ${taken('l')}
        ), line AS MATERIALIZED (
          -- The target's line, read once (one index probe) for the rule below and for the clean-up after a grant.
          SELECT w.waiter_id, w.seq, ${aged('w.queued_at', '$8')} AS eff, ${liveWaiter('w')} AS live
          FROM ${waiter} w WHERE w.target_id = $1
        ), me AS (
          -- The caller's effective priority: a queued waiter ages from when it first queued; a newcomer has waited 0.
          SELECT CASE WHEN $6::uuid IS NULL THEN $4::bigint
            ELSE coalesce((SELECT eff FROM line WHERE waiter_id = $6::uuid), $4::bigint) END AS eff
        ), won AS (
          INSERT INTO ${lease} AS l
            (target_id, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at, updated_at, hold_ms)
          SELECT $1, $2::uuid, ${token}, $3, $4, $5, clock_timestamp(), clock_timestamp(), $9
          WHERE NOT EXISTS (SELECT 1 FROM held)
            AND NOT EXISTS (SELECT 1 FROM line a, me WHERE a.live AND a.waiter_id IS DISTINCT FROM $6::uuid
              AND (a.eff > me.eff OR (a.eff = me.eff AND a.seq < coalesce($7::bigint, 9223372036854775807))))
          ON CONFLICT (target_id) DO UPDATE SET
            lease_token = EXCLUDED.lease_token, owner = EXCLUDED.owner,
            fencing_token = ${faultSwitches.tokenBeforeLock ? 'EXCLUDED.fencing_token' : token},
            priority = EXCLUDED.priority, lease_timeout_ms = EXCLUDED.lease_timeout_ms,
            acquired_at = EXCLUDED.acquired_at, updated_at = EXCLUDED.updated_at, hold_ms = EXCLUDED.hold_ms
          WHERE NOT ${taken('l')}
          RETURNING l.fencing_token, (l.xmax <> 0) AS updated
        ), granted AS (
          -- Dead waiters go with the grant: they were skipped, and no live waiter may be left to evict them. Only
          -- when the target has a line at all (the uncontended path skips the probe).
          DELETE FROM ${waiter} w
          WHERE w.target_id = $1 AND EXISTS (SELECT 1 FROM line) AND EXISTS (SELECT 1 FROM won)
            AND (w.waiter_id = $6::uuid OR NOT ${liveWaiter('w')})
        ), queued AS (
          ${queued}
        )
        -- A takeover, as opposed to the acquisition of a released row: the row still had a (now expired) holder. The
        -- statement's snapshot still shows the row as it was; read only when a row was updated.
        SELECT won.fencing_token::text AS fencing_token,
          CASE WHEN won.updated THEN coalesce((SELECT p.lease_token IS NOT NULL FROM ${lease} p WHERE p.target_id = $1),
            false) ELSE false END AS took_over,
          CASE WHEN won.updated
            THEN (SELECT p.owner FROM ${lease} p WHERE p.target_id = $1 AND p.lease_token IS NOT NULL) END
            AS previous_owner,
          NULL::float8 AS hold_left_ms, NULL AS seq, NULL::timestamptz AS queued_at
        FROM won
        UNION ALL
        -- Refused: its place in line when it was queued, and, with no live holder left and only a hold's tail in the
        -- way, when that tail ends (no NOTIFY will say so).
        SELECT NULL, NULL, NULL, r.hold_left_ms, q.seq::text, q.queued_at
        FROM (SELECT (SELECT (extract(epoch FROM l.acquired_at + l.hold_ms ${MS} - clock_timestamp()) * 1000)::float8
            FROM ${lease} l WHERE l.target_id = $1 AND NOT ${live('l')} AND ${holding('l')}) AS hold_left_ms) r
        LEFT JOIN queued q ON true
        WHERE NOT EXISTS (SELECT 1 FROM won) AND (r.hold_left_ms IS NOT NULL OR q.seq IS NOT NULL)`;
}

/**
 * The single release statement (its contract: `LeaseStore.release`). $1 target, $2 lease token, $3 head-only NOTIFY
 * channel (NULL: none), $4 asyncReleaseCommits, $5 aging interval ms.
 */
function singleReleaseSql(n: ReturnType<typeof leaseObjectNames>): string {
  return `WITH gone AS (
          UPDATE ${n.lease} SET lease_token = NULL WHERE target_id = $1 AND lease_token = $2::uuid
          RETURNING target_id
        ), head AS (
          SELECT g.target_id, ${headOf(n, 'g.target_id', '$5')} AS waiter_id FROM gone g
        ), woke AS (
          SELECT pg_notify($3, h.waiter_id::text || ' ' || h.target_id) FROM head h
          WHERE $3::text IS NOT NULL AND h.waiter_id IS NOT NULL
        )
        -- With asyncReleaseCommits, only this statement's commit skips the WAL flush (a lost release only delays).
        SELECT EXISTS (SELECT 1 FROM gone) AS released, (SELECT count(*) FROM woke) AS woke,
          CASE WHEN $4::boolean THEN set_config('synchronous_commit', 'off', true) END AS async_commit`;
}

/**
 * The enqueue statement (its contract: `LeaseStore.enqueue`). $1 target, $2 waiter id, $3 owner, $4 priority, $5 waiter
 * timeout, $6 queued_at and $7 seq of an old place (re-queue), $8 maxWaitersPerTarget, $9 the statement's bound. The
 * place in line orders across failovers like a fencing token (see historyOrdered): a waiter queued after a failover
 * never passes one queued before it that re-queues at its old place.
 */
function enqueueSql(n: ReturnType<typeof leaseObjectNames>): string {
  const { waiter, waiterSequence } = n;
  return `INSERT INTO ${waiter} AS w (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
        SELECT $1, $2::uuid, $3, $4, $5, coalesce($6::timestamptz, clock_timestamp()),
          coalesce($7::bigint, ${historyOrdered(waiterSequence)}), ${bornWithin('$5', '$9')}
        WHERE (SELECT count(*) FROM ${waiter} c WHERE c.target_id = $1 AND ${liveWaiter('c')}) < $8
        ON CONFLICT (target_id, waiter_id) DO UPDATE SET heartbeat_at = greatest(w.heartbeat_at, excluded.heartbeat_at)
        RETURNING w.seq::text AS seq, w.queued_at`;
}

/**
 * The renewal statement (see `renew`); `$3` the leases' timelines (null: no history check), `$4` the system
 * identifier they were acquired under. Two texts per store, with and without reading the system identifier.
 */
function renewSql(n: ReturnType<typeof leaseObjectNames>, readSystemId: boolean): string {
  const { lease } = n;
  return `WITH here AS MATERIALIZED (${serverHistorySql(readSystemId)}),
    mine AS (
      -- Without history ($3 null) the timelines are null: unnest pads a missing array.
      SELECT * FROM unnest($1::text[], $2::uuid[], $3::bigint[]) AS m(target_id, lease_token, timeline)
    ), current AS MATERIALIZED (
      -- Leases of the history the server is in: the same timeline, the same database cluster.
      SELECT mine.target_id, mine.lease_token FROM mine, here
      WHERE $3::bigint[] IS NULL OR (NOT here.recovery AND mine.timeline = here.timeline::bigint
        AND ($4::text IS NULL OR here.system_id IS NULL OR here.system_id = $4::text))
    ), lockable AS MATERIALIZED (
      SELECT l.target_id FROM ${lease} l
      JOIN current c ON l.target_id = c.target_id AND l.lease_token = c.lease_token
      WHERE ${live('l')}
      FOR NO KEY UPDATE OF l SKIP LOCKED
    ), renewed AS (
      UPDATE ${lease} AS l SET updated_at = clock_timestamp() FROM lockable
      WHERE l.target_id = lockable.target_id
      RETURNING l.lease_token
    )
    SELECT mine.lease_token::text AS lease_token,
      CASE WHEN c.lease_token IS NULL THEN 'failover'
        WHEN r.lease_token IS NOT NULL THEN 'kept'
        WHEN l.lease_token IS DISTINCT FROM mine.lease_token THEN 'lost'
        WHEN ${live('l')} THEN 'skipped'
        ELSE 'expired' END AS outcome,
      here.recovery, here.timeline, here.system_id
    FROM mine CROSS JOIN here
    LEFT JOIN current c ON c.lease_token = mine.lease_token
    LEFT JOIN renewed r ON r.lease_token = mine.lease_token
    LEFT JOIN ${lease} l ON l.target_id = mine.target_id`;
}

/**
 * The set-based acquire: the rules of the single statement (`LeaseStore.tryAcquire`) applied to every caller of a
 * batch, in one statement and one commit. $1 jsonb array of `AcquireBatchItem` (i = 1 … n), $2 owner, $3 lease
 * timeout ms, $4 aging interval ms (NULL: off). One row per caller, ordered by i.
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
function batchAcquireSql(n: ReturnType<typeof leaseObjectNames>): string {
  const { lease, waiter, fencingSequence } = n;
  const nextvalArg = sequenceLiteral(fencingSequence);
  return `WITH history AS MATERIALIZED (SELECT ${TIMELINE} AS timeline), req AS (
      SELECT * FROM jsonb_to_recordset($1::jsonb)
        AS r(i int, target_id text, lease_token uuid, priority int, waiter_id uuid, waiter_seq bigint, hold_ms int)
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
      SELECT c.*, EXISTS (SELECT 1 FROM ${lease} l WHERE l.target_id = c.target_id) AS has_row
      FROM cand c
      WHERE NOT EXISTS (SELECT 1 FROM ${lease} l WHERE l.target_id = c.target_id AND ${taken('l')})
        AND NOT EXISTS (
          SELECT 1 FROM ${waiter} w
          WHERE w.target_id = c.target_id AND w.waiter_id IS DISTINCT FROM c.waiter_id AND ${liveWaiter('w')}
            AND (${aged('w.queued_at', '$4')} > c.eff
              OR (${aged('w.queued_at', '$4')} = c.eff AND w.seq < coalesce(c.waiter_seq, 9223372036854775807))))
    ), locked AS MATERIALIZED (
      SELECT l.target_id, l.lease_token IS NOT NULL AS was_held, l.owner AS previous_owner
      FROM ${lease} l JOIN open o ON o.target_id = l.target_id
      WHERE o.has_row AND NOT ${taken('l')}
      ORDER BY l.target_id
      FOR NO KEY UPDATE OF l SKIP LOCKED
    ), won_old AS (
      -- The token is drawn here, per row, after the row lock (locked is materialized first): larger than every
      -- earlier grant of the key.
      UPDATE ${lease} AS l SET lease_token = o.lease_token, fencing_token = ${historyToken('x.v')},
        owner = $2, priority = o.priority, lease_timeout_ms = $3, acquired_at = clock_timestamp(),
        updated_at = clock_timestamp(), hold_ms = o.hold_ms
      FROM (SELECT k.target_id, k.was_held, k.previous_owner, nextval(${nextvalArg}) AS v FROM locked k) x
        JOIN open o ON o.target_id = x.target_id, history h
      WHERE l.target_id = x.target_id
      RETURNING l.target_id, l.fencing_token, x.was_held, x.previous_owner
    ), won_new AS (
      INSERT INTO ${lease} AS l
        (target_id, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at, updated_at, hold_ms)
      SELECT f.target_id, f.lease_token, ${historyToken('f.v')}, $2, f.priority, $3,
        clock_timestamp(), clock_timestamp(), f.hold_ms
      FROM (SELECT o.*, nextval(${nextvalArg}) AS v FROM open o WHERE NOT o.has_row) f, history h
      ORDER BY f.target_id
      ON CONFLICT (target_id) DO NOTHING
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
        FROM ${lease} l WHERE l.target_id = m.target_id AND NOT ${live('l')} AND ${holding('l')}) END AS hold_left_ms
    FROM mine m
    LEFT JOIN open o ON o.target_id = m.target_id
    LEFT JOIN won w ON w.target_id = m.target_id AND o.i = m.i
    ORDER BY m.i`;
}

/**
 * The next waiter of each target in `targets` (a relation with a `target_id` column): the one the next acquire
 * statement would let through — highest effective priority, then first queued, live, not `except`. $aging is the
 * aging interval parameter.
 */
function headOf(n: ReturnType<typeof leaseObjectNames>, target: string, aging: string, except?: string): string {
  return `(SELECT w.waiter_id FROM ${n.waiter} w WHERE w.target_id = ${target} AND ${liveWaiter('w')}
      ${except ? `AND w.waiter_id <> ${except}` : ''}
      ORDER BY ${aged('w.queued_at', aging)} DESC, w.seq LIMIT 1)`;
}

/**
 * The set-based soft release (rows kept, token cleared): $1 jsonb array of `{ i, target_id, lease_token }`, $2 the
 * head-only NOTIFY channel (NULL: no NOTIFY), $3 asyncReleaseCommits, $4 aging interval ms (NULL: off). Rows are
 * locked in key order and never waited for: a row locked by another transaction (a fenced write of the holder's, say)
 * is `retry`, and that caller alone goes the single statement, which waits for it.
 */
function batchReleaseSql(n: ReturnType<typeof leaseObjectNames>): string {
  const { lease } = n;
  return `WITH req AS (
      SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(i int, target_id text, lease_token uuid) ${ONE_ROW_ESTIMATE}
    ), locked AS MATERIALIZED (
      SELECT l.target_id, l.lease_token FROM ${lease} l
      JOIN (SELECT DISTINCT target_id, lease_token FROM req) p
        ON l.target_id = p.target_id AND l.lease_token = p.lease_token
      ORDER BY l.target_id
      FOR NO KEY UPDATE OF l SKIP LOCKED
    ), gone AS (
      UPDATE ${lease} l SET lease_token = NULL FROM locked k WHERE l.target_id = k.target_id
      RETURNING l.target_id, k.lease_token
    ), head AS (
      SELECT g.target_id, ${headOf(n, 'g.target_id', '$4')} AS waiter_id FROM gone g
    ), woke AS (
      SELECT pg_notify($2, h.waiter_id::text || ' ' || h.target_id) FROM head h
      WHERE $2::text IS NOT NULL AND h.waiter_id IS NOT NULL
    )
    SELECT r.i::int AS i,
      CASE WHEN EXISTS (SELECT 1 FROM gone g WHERE g.target_id = r.target_id AND g.lease_token = r.lease_token)
          THEN 'released'
        WHEN EXISTS (SELECT 1 FROM ${lease} l WHERE l.target_id = r.target_id AND l.lease_token = r.lease_token)
          THEN 'retry'
        ELSE 'gone' END AS outcome,
      (SELECT count(*) FROM woke) AS woke,
      CASE WHEN $3::boolean THEN set_config('synchronous_commit', 'off', true) END AS async_commit
    FROM req r ORDER BY r.i`;
}

/** A head-only NOTIFY payload: `<waiter id> <target key>` (on the channel `LeaseStore.headChannel`). */
export function parseHeadPayload(payload: string): { waiterId: string; targetKey: string } | undefined {
  const match = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}) (.+)$/s.exec(payload);
  return match ? { waiterId: match[1], targetKey: match[2] } : undefined;
}

function outOfOrder(index: number): Error {
  return new Error(`nest-pg-lease: a batch answered out of order at row ${index} (a bug: please report it)`);
}

/**
 * Batches in flight at once per kind (acquisitions, releases): one, classic group commit. Measured on the
 * benchmark's 2-CPU box (docs/performance.md): with two in flight, batches were half as large and throughput lower
 * at 16 and 64 clients (851 vs 1,236/s and 2,408 vs 3,161/s): the client, not the disk, is the bottleneck there, and
 * fewer statements win. A stalled batch stops counting after the stall bound (see GroupCommit).
 */
const BATCHES_IN_FLIGHT = 1;

/**
 * The statements, bound to one set of table names. Hot statements are named, so `pg` prepares them once per
 * connection; names carry a hash of the table names so two configurations never share a prepared plan.
 */
export class LeaseStore {
  private readonly n: ReturnType<typeof leaseObjectNames>;
  private readonly sql: {
    acquire: string;
    acquireOrQueue: string;
    batchAcquire: string;
    batchRelease: string;
    release: string;
    enqueue: string;
    renew: string;
    renewWithoutSystemId: string;
  };
  private readonly prefix: string;
  private readonly heartbeatDb: SessionSource;
  private readonly waiterHeartbeatDb: SessionSource;
  private readonly dbSessions: SessionSource;
  /** The application's pool, for single statements: retried after a serialization failure. */
  private readonly pooled: Queryable;
  /** Whether renewals read the system identifier: set by `serverHistory()`, cleared when a renewal is refused it. */
  private systemIdReadable = true;
  /** The server's default isolation is not READ COMMITTED (see `checkIsolation`): acquisitions frame it explicitly. */
  private isolationFraming = false;
  /** Group commit of acquisitions and of releases (see group-commit.ts); `maxBatchSize` 1 sends every call alone. */
  private readonly acquisitions: GroupCommit<AcquireRequest, AcquiredRow | Refusal | 'retry'>;
  private readonly releases: GroupCommit<ReleaseItem, boolean | 'retry'>;

  /**
   * @param db the application's pool: acquisitions, releases, waiter changes, reads
   * @param heartbeatDb a connection of the lease heartbeat's own, so renewals never queue behind the application's
   *   queries (a pool works too: each renewal then checks out a client)
   * @param options the resolved options
   * @param waiterHeartbeatDb the waiter heartbeat's own connection, so a slow waiter renewal never delays a lease
   *   renewal (default: heartbeatDb)
   */
  constructor(
    private readonly db: PoolLike,
    heartbeatDb: SessionSource | PoolLike,
    private readonly options: ResolvedLeaseOptions,
    waiterHeartbeatDb: SessionSource | PoolLike = heartbeatDb,
  ) {
    const sessions = (source: SessionSource | PoolLike) => ('withSession' in source ? source : poolSessions(source));
    this.heartbeatDb = sessions(heartbeatDb);
    this.waiterHeartbeatDb = sessions(waiterHeartbeatDb);
    this.dbSessions = poolSessions(db);
    this.pooled = {
      query: (config) =>
        retryingSerializationFailures(() => (this.isolationFraming ? this.framed(config) : db.query(config))),
    };
    this.n = leaseObjectNames(options);
    // Built once: they depend only on the names (every value is a bound parameter).
    this.sql = {
      acquire: singleAcquireSql(this.n, false),
      acquireOrQueue: singleAcquireSql(this.n, true),
      batchAcquire: batchAcquireSql(this.n),
      batchRelease: batchReleaseSql(this.n),
      release: singleReleaseSql(this.n),
      enqueue: enqueueSql(this.n),
      renew: renewSql(this.n, true),
      renewWithoutSystemId: renewSql(this.n, false),
    };
    // A statement stalled past a heartbeat interval (a frozen server, a lost network) no longer holds back the calls
    // queued behind it: they go in a batch of their own (independence).
    const stallMs = Math.min(1_000, options.heartbeatIntervalMs);
    const batching = { maxBatch: options.maxBatchSize, maxInFlight: BATCHES_IN_FLIGHT, stallMs };
    this.acquisitions = new GroupCommit((items) => this.sendAcquisitions(items), {
      ...batching,
      splittable: isStatementError,
    });
    this.releases = new GroupCommit((items) => this.sendReleases(items), { ...batching, splittable: isStatementError });
    this.prefix = `lease_${createHash('sha1').update(`${options.schema}.${options.tableName}.${options.waiterTableName}`).digest('hex').slice(0, 10)}`;
  }

  /**
   * Hot statements are named, so `pg` prepares them once per connection. Behind a transaction pooler a prepared
   * statement belongs to whichever server connection ran it, not to our client: there every statement is unnamed.
   */
  private statement(name: string): { name?: string } {
    return this.options.pooler === 'transaction' ? {} : { name: `${this.prefix}_${name}` };
  }

  get channel(): string {
    return this.n.channel;
  }

  /**
   * One statement: a read-only pre-check (a live holder, or a live waiter ahead of the caller) short-cuts the insert,
   * so a failed attempt on a held row takes no row lock and writes no WAL; otherwise an upsert that takes only a free
   * (released or expired) row. A granted waiter's row, and the target's dead waiters, are deleted in the same
   * statement.
   *
   * Fencing order: the INSERT's source row is evaluated before conflict detection, so a token drawn there may be
   * older than a grant that commits while this statement stalls (a lock wait, a slow trigger, CPU starvation). It is
   * used only when the key has never had a row — then no earlier grant exists. Every later acquisition goes through
   * `DO UPDATE`, which draws its token after it has locked the row and found it free, i.e. after every earlier grant of
   * the key committed; that is why releases keep the row.
   *
   * The token carries the server's timeline in its high bits (see `historyOrdered`), so it also stays larger than
   * every token of the history before a failover. On a server in recovery the statement fails at once
   * (`LeaseUnavailableError`).
   */
  tryAcquire(request: AcquireRequest): Promise<AcquiredRow | Refusal> {
    if (this.options.maxBatchSize === 1 || request.queueAs !== undefined) {
      return retryingSerializationFailures(() => this.acquireOnce(request));
    }
    return this.acquisitions.submit(request).then((outcome) =>
      // A row the batch could not lock at once: this caller alone goes the single statement, which waits for it.
      outcome === 'retry' ? retryingSerializationFailures(() => this.acquireOnce(request)) : outcome,
    );
  }

  /** Batches sent so far and their sizes (tests, benchmarks). */
  get batchStats() {
    return { acquire: { ...this.acquisitions.stats }, release: { ...this.releases.stats } };
  }

  /**
   * One batch of acquisitions: a lone caller sends the single statement (it goes at once and waits for a locked row,
   * exactly as without group commit); several send the set-based statement (`batchAcquireSql`), one commit for all.
   */
  private async sendAcquisitions(
    requests: AcquireRequest[],
  ): Promise<Array<ItemOutcome<AcquiredRow | Refusal | 'retry'>>> {
    if (requests.length === 1) {
      return [{ ok: true, value: await retryingSerializationFailures(() => this.acquireOnce(requests[0])) }];
    }
    const batch: AcquireBatchItem[] = requests.map((request, index) => ({
      i: index + 1,
      target_id: request.targetKey,
      lease_token: request.leaseToken,
      priority: request.priority,
      waiter_id: request.waiterId ?? null,
      waiter_seq: request.waiterSeq === undefined ? null : request.waiterSeq.toString(),
      hold_ms: request.holdMs,
    }));
    const { rows, sentAt } = await this.onClient<AcquireBatchRow>({
      ...this.statement('acquire_batch'),
      text: this.sql.batchAcquire,
      values: [JSON.stringify(batch), this.options.owner, this.options.leaseTimeoutMs, this.options.agingIntervalMs],
      query_timeout: this.acquireTimeoutMs,
    });
    return requests.map((_, index): ItemOutcome<AcquiredRow | Refusal | 'retry'> => {
      const row = rows[index];
      if (row?.i !== index + 1) return { ok: false, error: outOfOrder(index) };
      if (row.outcome === 'retry') return { ok: true, value: 'retry' };
      if (row.outcome === 'refused') return { ok: true, value: { refused: true, holdLeftMs: row.hold_left_ms } };
      const value = {
        fencingToken: BigInt(row.fencing_token!),
        sentAt,
        tookOver: row.took_over === true,
        previousOwner: row.previous_owner,
      };
      return { ok: true, value };
    });
  }

  /**
   * One statement on a client of its own (framed in READ COMMITTED when the server default is stricter), timed from
   * its send: a lease counts from when the database could have written `updated_at` at the earliest. A client that
   * failed is released as broken; a statement error maps to the library's errors as in the single statement.
   */
  private async onClient<R extends pg.QueryResultRow>(
    config: pg.QueryConfig & { query_timeout: number },
  ): Promise<{ rows: R[]; sentAt: number }> {
    const client = await this.db.connect();
    let broken: Error | undefined;
    const onError = (error: Error) => (broken = error);
    client.on('error', onError);
    try {
      const framed = this.isolationFraming;
      if (framed) {
        const begin = { text: 'BEGIN ISOLATION LEVEL READ COMMITTED', query_timeout: config.query_timeout };
        await (client as Queryable).query(begin);
      }
      const sentAt = performance.now();
      const { rows } = await (client as Queryable).query<R>(config);
      if (framed) await (client as Queryable).query({ text: 'COMMIT', query_timeout: config.query_timeout });
      return { rows, sentAt };
    } catch (error) {
      broken ??= error as Error;
      throw error;
    } finally {
      client.off('error', onError);
      client.release(broken);
    }
  }

  private async acquireOnce(request: AcquireRequest): Promise<AcquiredRow | Refusal> {
    // Time the send, not the wait for a pooled connection: the local deadline must count from when the database
    // could have written updated_at at the earliest.
    const client = await this.db.connect();
    // A checked-out client has no error listener of the pool's. If the server ends the session right after our reply
    // (both in one TCP read), the error event would come before our release and crash the process: note it instead,
    // and release the client as broken.
    let broken: Error | undefined;
    const onError = (error: Error) => (broken = error);
    client.on('error', onError);
    // Under a serializable (or repeatable read) server default, concurrent acquisitions of one key would mostly fail
    // with 40001: frame the statement in a READ COMMITTED transaction instead (two more round trips, only then).
    const framed = this.isolationFraming;
    let sentAt = performance.now();
    let result: pg.QueryResult<{
      fencing_token: string | null;
      took_over: boolean | null;
      previous_owner: string | null;
      hold_left_ms: number | null;
      seq: string | null;
      queued_at: Date | null;
    }>;
    const { queueAs } = request;
    const queueValues =
      queueAs === undefined
        ? []
        : [queueAs.waiterId, this.options.waiterTimeoutMs, queueAs.boundMs, this.options.maxWaitersPerTarget];
    // A queueing attempt is given up when its row would be born dead anyway; a grant that late is past its local
    // deadline at once (it counts from the send), so waiting longer than acquireTimeoutMs costs nothing there.
    const timeoutMs = queueAs === undefined ? this.acquireTimeoutMs : queueAs.boundMs;
    try {
      if (framed) {
        const begin = { text: 'BEGIN ISOLATION LEVEL READ COMMITTED', query_timeout: timeoutMs };
        await (client as Queryable).query(begin);
        sentAt = performance.now();
      }
      result = await (client as Queryable).query({
        ...this.statement(queueAs === undefined ? 'acquire' : 'acquire_or_queue'),
        text: queueAs === undefined ? this.sql.acquire : this.sql.acquireOrQueue,
        values: [
          request.targetKey,
          request.leaseToken,
          this.options.owner,
          request.priority,
          this.options.leaseTimeoutMs,
          request.waiterId ?? null,
          request.waiterSeq === undefined ? null : request.waiterSeq.toString(),
          this.options.agingIntervalMs,
          request.holdMs,
          ...queueValues,
        ],
        // An answer later than this would bring a lease already past its local deadline; the broken client is dropped
        // and a row committed meanwhile expires by itself.
        query_timeout: timeoutMs,
      });
      if (framed) await (client as Queryable).query({ text: 'COMMIT', query_timeout: timeoutMs });
    } catch (error) {
      broken ??= error as Error;
      throw (
        exhausted(error, 'fencing_token', this.n.fencingSequence) ??
        exhausted(error, 'seq', this.n.waiterSequence) ??
        readOnly(error, request.targetKey) ??
        error
      );
    } finally {
      client.off('error', onError);
      client.release(broken);
    }
    const row = result.rows[0];
    if (!row || row.fencing_token === null) {
      const refusal = { refused: true as const, holdLeftMs: row?.hold_left_ms ?? null };
      if (queueAs === undefined) return refusal;
      const place = row?.seq ? { seq: BigInt(row.seq), queuedAt: row.queued_at! } : null;
      return { ...refusal, place };
    }
    return {
      fencingToken: BigInt(row.fencing_token),
      sentAt,
      tookOver: row.took_over === true,
      previousOwner: row.previous_owner,
    };
  }

  /**
   * Runs one statement (`work`) bounded on the server as well as on the client: `query_timeout` is client-side only,
   * and an abandoned statement would otherwise keep waiting in its backend and commit later ("ghost" renewals). Here
   * it ends within `timeoutMs` on the server (statement_timeout, lock_timeout) and runs in READ COMMITTED.
   * On a session bounded by its own settings (`SessionSource.boundedMs`: the library's dedicated connections) that is
   * the statement alone, one round trip. Elsewhere (behind a transaction pooler) it is framed in a short transaction
   * with SET LOCAL, so nothing outlives it; a stalled client then cannot keep the transaction's row locks for longer
   * (idle_in_transaction_session_timeout), and a session dropped before COMMIT is rolled back. The timeouts are
   * integers of validated options. Either way the statement gets a custom plan (see `DedicatedConnection`).
   */
  private boundedStatement<T>(
    source: SessionSource,
    timeoutMs: number,
    work: (session: Queryable, left: () => number) => Promise<T>,
  ): Promise<T> {
    return source.withSession(async (session) => {
      const deadline = performance.now() + timeoutMs;
      const left = () => Math.max(1, Math.ceil(deadline - performance.now()));
      if (source.boundedMs !== undefined && source.boundedMs <= timeoutMs) return work(session, left);
      const ms = Math.max(1, Math.floor(timeoutMs));
      await session.query({
        text: `BEGIN ISOLATION LEVEL READ COMMITTED;
          SET LOCAL statement_timeout = ${ms}; SET LOCAL lock_timeout = ${ms};
          SET LOCAL idle_in_transaction_session_timeout = ${ms}; SET LOCAL plan_cache_mode = force_custom_plan`,
        query_timeout: left(),
      });
      const result = await work(session, left);
      await session.query({ text: 'COMMIT', query_timeout: left() });
      return result;
    });
  }

  /**
   * Renews every lease in the batch with one statement. Rows locked by another transaction — typically a fenced
   * transaction of this very process — are skipped, not waited for (SKIP LOCKED): one lease's long fence must not
   * cost the others their renewal. An expired row is never renewed, even with the right token: its holder has
   * already given it up locally, and reviving it would block the key for another timeout.
   *
   * With `history`, the same statement asks the server where it stands (so on the same server, even behind a pooler
   * whose client connection survived a failover): a lease acquired under another history — another timeline than its
   * fencing token carries, another system identifier — is not renewed but reported in `failover`. Its row on a
   * promoted server may be older than its holder believes (an asynchronous standby misses renewals), so the local
   * deadline no longer protects it. A server in recovery refuses the statement (it writes); the history is then read
   * alone, and every lease is reported in `failover`.
   *
   * One round trip on the heartbeat's own connection (see `boundedStatement`).
   */
  async renew(
    targetKeys: string[],
    leaseTokens: string[],
    timeoutMs: number,
    history?: LeaseHistory,
  ): Promise<RenewResult> {
    try {
      return await this.renewOnce(targetKeys, leaseTokens, timeoutMs, history);
    } catch (error) {
      // The heartbeat's role (sessionUrl may name another) may not read the system identifier: go on without it.
      if (history && systemIdRefused(error) && this.systemIdReadable) {
        this.systemIdReadable = false;
        return this.renew(targetKeys, leaseTokens, timeoutMs, history);
      }
      if (history && readOnly(error, '')) return this.renewOnReadOnly(leaseTokens, timeoutMs, error);
      throw error;
    }
  }

  private async renewOnce(
    targetKeys: string[],
    leaseTokens: string[],
    timeoutMs: number,
    history?: LeaseHistory,
  ): Promise<RenewResult> {
    type Row = {
      lease_token: string;
      outcome: 'kept' | 'skipped' | 'expired' | 'lost' | 'failover';
    } & Parameters<typeof serverHistory>[0];
    const { rows } = await this.boundedStatement(this.heartbeatDb, timeoutMs, (session, left) =>
      session.query<Row>({
        ...this.statement(this.systemIdReadable ? 'renew' : 'renew_no_system_id'),
        text: this.systemIdReadable ? this.sql.renew : this.sql.renewWithoutSystemId,
        values: [
          targetKeys,
          leaseTokens,
          history ? history.fencingTokens.map((token) => timelineOf(token).toString()) : null,
          history?.systemId ?? null,
        ],
        query_timeout: left(),
      }),
    );
    const outcome: RenewResult = { kept: new Set(), skipped: new Set(), expired: new Set() };
    if (history) {
      outcome.failover = new Set();
      if (rows[0]) outcome.history = serverHistory(rows[0]);
    }
    for (const row of rows) {
      if (row.outcome === 'failover') outcome.failover?.add(row.lease_token);
      else if (row.outcome !== 'lost') outcome[row.outcome].add(row.lease_token);
    }
    return outcome;
  }

  /**
   * A renewal the server refused as a write (a standby in recovery, or a server set read-only): in recovery every
   * lease is lost to the failover under way; otherwise the refusal is the tick's error (retried next tick).
   */
  private async renewOnReadOnly(leaseTokens: string[], timeoutMs: number, refusal: unknown): Promise<RenewResult> {
    const { rows } = await this.boundedStatement(this.heartbeatDb, timeoutMs, (session, left) =>
      session.query<Parameters<typeof serverHistory>[0]>({
        text: serverHistorySql(this.systemIdReadable),
        query_timeout: left(),
      }),
    );
    const here = serverHistory(rows[0]);
    if (!here.recovery) throw refusal;
    const none = { kept: new Set<string>(), skipped: new Set<string>(), expired: new Set<string>() };
    return { ...none, history: here, failover: new Set(leaseTokens) };
  }

  /**
   * Where the server stands in its history (bootstrap: the system identifier the leases are acquired under), and
   * whether the role may read the system identifier at all.
   */
  async serverHistory(): Promise<ServerHistory> {
    const { rows } = await this.db.query<{ readable: boolean }>({
      text: `SELECT has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE') AS readable`,
    });
    this.systemIdReadable = rows[0].readable;
    const result = await this.db.query<Parameters<typeof serverHistory>[0]>({
      text: serverHistorySql(this.systemIdReadable),
    });
    return serverHistory(result.rows[0]);
  }

  /**
   * Token-guarded soft release: clears the lease token and keeps the row (with its fencing token), so the next
   * acquisition of the key draws its token under the row lock (see `tryAcquire`); the old token then matches nothing
   * (no renewal, no release, no fenced write). Releases are batched like acquisitions (group commit). When the target
   * has a live waiter, the NOTIFY names the next one only (head-only handoff, `headChannel`: `<waiter id> <key>`,
   * never a token): only that waiter's process attempts, the others sleep on. Returns whether our lease was released.
   */
  async release(targetKey: string, leaseToken: string, timeoutMs: number): Promise<boolean> {
    if (this.options.maxBatchSize === 1) return this.releaseOnce(targetKey, leaseToken, timeoutMs);
    const outcome = await this.releases.submit({ targetKey, leaseToken, timeoutMs });
    // The row was locked by another transaction (a fenced write still finishing): alone, waiting for it.
    return outcome === 'retry' ? this.releaseOnce(targetKey, leaseToken, timeoutMs) : outcome;
  }

  private async sendReleases(items: ReleaseItem[]): Promise<Array<ItemOutcome<boolean | 'retry'>>> {
    if (items.length === 1) {
      const [item] = items as [ReleaseItem];
      return [{ ok: true, value: await this.releaseOnce(item.targetKey, item.leaseToken, item.timeoutMs) }];
    }
    const batch = items.map((item, index) => ({
      i: index + 1,
      target_id: item.targetKey,
      lease_token: item.leaseToken,
    }));
    const { asyncReleaseCommits, agingIntervalMs } = this.options;
    const { rows } = await retryingSerializationFailures(() =>
      this.onClient<{ i: number; outcome: 'released' | 'gone' | 'retry' }>({
        ...this.statement('release_batch'),
        text: this.sql.batchRelease,
        values: [JSON.stringify(batch), this.notifyChannel, asyncReleaseCommits, agingIntervalMs],
        query_timeout: Math.min(...items.map((item) => item.timeoutMs)),
      }),
    );
    return items.map((_, index): ItemOutcome<boolean | 'retry'> => {
      const row = rows[index];
      if (row?.i !== index + 1) return { ok: false, error: outOfOrder(index) };
      return { ok: true, value: row.outcome === 'retry' ? 'retry' : row.outcome === 'released' };
    });
  }

  /** The single release statement: waits for a locked row. */
  private async releaseOnce(targetKey: string, leaseToken: string, timeoutMs: number): Promise<boolean> {
    const result = await this.pooled.query<{ released: boolean }>({
      ...this.statement('release'),
      text: this.sql.release,
      values: [
        targetKey,
        leaseToken,
        this.notifyChannel,
        this.options.asyncReleaseCommits,
        this.options.agingIntervalMs,
      ],
      query_timeout: timeoutMs,
    });
    return result.rows[0]?.released === true;
  }

  /**
   * The channel of head-only wake-ups (payload `<waiter id> <key>`). A channel of its own: a key may itself look like
   * such a payload, and a process of an older version, listening on `channel` for keys, simply does not hear these
   * and falls back to its poll.
   */
  get headChannel(): string {
    return `${this.options.tableName}_next`;
  }

  /** The head channel when NOTIFY is on, else null (the statements then notify nobody). */
  private get notifyChannel(): string | null {
    return this.options.notify ? this.headChannel : null;
  }

  /**
   * First statement of a fenced transaction: locks the lease row and reads its token, and the server's timeline (a
   * lease of another timeline must not write: see `renew`). It also bounds how long the transaction may sit idle, so a
   * holder paused inside it cannot block a takeover for ever. On a server in recovery: `LeaseUnavailableError`.
   */
  async lockForFence(
    manager: EntityManager | QueryRunner,
    targetKey: string,
  ): Promise<{ leaseToken: string | null; timeline: bigint }> {
    let rows: Array<{ lease_token: string | null; timeline: string }>;
    try {
      rows = await manager.query(
        `SELECT (SELECT lease_token::text FROM ${this.n.lease} WHERE target_id = $1 FOR UPDATE) AS lease_token,
           set_config('idle_in_transaction_session_timeout', $2, true), ${TIMELINE}::text AS timeline`,
        [targetKey, String(this.options.fencedIdleTimeoutMs)],
      );
    } catch (error) {
      throw readOnly(error, targetKey) ?? error;
    }
    return { leaseToken: rows[0]?.lease_token ?? null, timeline: BigInt(rows[0].timeline) };
  }

  /**
   * Queues a waiter, or refreshes it when it is already queued. `place` re-queues an evicted waiter at its old place.
   * Returns null when the target already has `maxWaitersPerTarget` live waiters.
   *
   * One statement. Its row is born with `timeoutMs` to live, counted from when the statement reached the server
   * (`statement_timestamp()`), and the client gives up on it after `timeoutMs`: a row that lands after its caller gave
   * up on it (a statement stalled in the server) is dead on arrival, so it never blocks the line. A wait that gives up
   * while its enqueue is in flight removes the row once the statement has landed (see `WaitQueue`).
   */
  async enqueue(
    targetKey: string,
    waiterId: string,
    priority: number,
    place: WaiterPlace | undefined,
    timeoutMs: number,
  ): Promise<WaiterPlace | null> {
    const { waiterSequence } = this.n;
    const bound = Math.max(1, Math.min(Math.floor(timeoutMs), this.options.waiterTimeoutMs));
    const result = await this.pooled
      .query<{ seq: string; queued_at: Date }>({
        ...this.statement('enqueue'),
        text: this.sql.enqueue,
        values: [
          targetKey,
          waiterId,
          this.options.owner,
          priority,
          this.options.waiterTimeoutMs,
          place?.queuedAt ?? null,
          place ? place.seq.toString() : null,
          this.options.maxWaitersPerTarget,
          bound,
        ],
        query_timeout: bound,
      })
      .catch((error: unknown) => {
        throw exhausted(error, 'seq', waiterSequence) ?? error;
      });
    const row = result.rows[0];
    return row ? { seq: BigInt(row.seq), queuedAt: row.queued_at } : null;
  }

  /**
   * Renews this process's waiters in one statement and removes dead waiters (not ours) of the same targets, waking
   * the targets whose line moved. Returns the waiter ids still queued.
   */
  async renewWaiters(targetKeys: string[], waiterIds: string[], timeoutMs: number): Promise<Set<string>> {
    const { waiter } = this.n;
    const statement = (left: () => number) => ({
      ...this.statement('renew_waiters'),
      text: `WITH mine AS (
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
          FROM (SELECT t.target_id, ${headOf(this.n, 't.target_id', '$4')} AS waiter_id
            FROM (SELECT DISTINCT target_id FROM dead) t) h
          WHERE $3::text IS NOT NULL AND h.waiter_id IS NOT NULL
        ), renewed AS (
          UPDATE ${waiter} AS w SET heartbeat_at = clock_timestamp()
          FROM mine WHERE w.target_id = mine.target_id AND w.waiter_id = mine.waiter_id
          RETURNING w.waiter_id::text AS waiter_id
        )
        -- UNION ALL makes PostgreSQL evaluate the NOTIFY branch whatever the renewal returns.
        SELECT waiter_id FROM renewed UNION ALL SELECT NULL FROM woke`,
      values: [targetKeys, waiterIds, this.notifyChannel, this.options.agingIntervalMs],
      query_timeout: left(),
    });
    const result = await this.boundedStatement(this.waiterHeartbeatDb, timeoutMs, (session, left) =>
      session.query<{ waiter_id: string }>(statement(left)),
    );
    return new Set(result.rows.flatMap((row) => (row.waiter_id ? [row.waiter_id] : [])));
  }

  /** Removes a waiter that gives up; wakes the others when the target is free (the line moved). */
  async dequeue(targetKey: string, waiterId: string): Promise<void> {
    const { lease, waiter } = this.n;
    await this.pooled.query({
      ...this.statement('dequeue'),
      text: `WITH gone AS (
          DELETE FROM ${waiter} WHERE target_id = $1 AND waiter_id = $2::uuid RETURNING target_id
        )
        -- Head-only: the new head of the line (not the leaving waiter, whose row this statement still sees).
        SELECT pg_notify($3, h.waiter_id::text || ' ' || h.target_id)
        FROM (SELECT gone.target_id, ${headOf(this.n, 'gone.target_id', '$4', '$2::uuid')} AS waiter_id FROM gone
          WHERE NOT EXISTS (SELECT 1 FROM ${lease} l WHERE l.target_id = gone.target_id AND ${taken('l')})) h
        WHERE $3::text IS NOT NULL AND h.waiter_id IS NOT NULL`,
      values: [targetKey, waiterId, this.notifyChannel, this.options.agingIntervalMs],
    });
  }

  /** Removes all the given waiter rows (shutdown). */
  async dequeueAll(waiterIds: string[]): Promise<void> {
    if (waiterIds.length === 0) return;
    await this.pooled.query({
      text: `DELETE FROM ${this.n.waiter} WHERE waiter_id = ANY($1::uuid[])`,
      values: [waiterIds],
    });
  }

  /**
   * Holders (live or expired; released rows hold nothing) and waiters, each target's waiters in grant order; ages by
   * the database clock.
   */
  async snapshot(targetKey?: string): Promise<SnapshotRow[]> {
    const { lease, waiter } = this.n;
    const ms = (expression: string) => `(extract(epoch FROM clock_timestamp() - ${expression}) * 1000)::float8`;
    const result = await this.pooled.query<SnapshotRow>({
      text: `SELECT * FROM (
          SELECT 'held' AS state, target_id, owner, priority, priority::bigint AS effective_priority,
            fencing_token::text AS fencing_token, NULL::text AS seq,
            ${ms('acquired_at')} AS age_ms, ${ms('updated_at')} AS since_heartbeat_ms, lease_timeout_ms AS timeout_ms
          FROM ${lease} WHERE lease_token IS NOT NULL AND ($1::text IS NULL OR target_id = $1)
          UNION ALL
          SELECT 'waiting', target_id, owner, priority, ${aged('w.queued_at', '$2')}, NULL, seq::text,
            ${ms('queued_at')}, ${ms('heartbeat_at')}, timeout_ms
          FROM ${waiter} w WHERE $1::text IS NULL OR target_id = $1
        ) s
        ORDER BY target_id, state, effective_priority DESC, seq::bigint`,
      values: [targetKey ?? null, this.options.agingIntervalMs],
    });
    return result.rows;
  }

  /** One statement in an explicit READ COMMITTED transaction (the server default is stricter: see checkIsolation). */
  private framed<R extends pg.QueryResultRow>(
    config: pg.QueryConfig & { query_timeout?: number },
  ): Promise<pg.QueryResult<R>> {
    return this.dbSessions.withSession(async (session) => {
      await session.query({ text: 'BEGIN ISOLATION LEVEL READ COMMITTED', query_timeout: config.query_timeout });
      const result = await session.query<R>(config);
      await session.query({ text: 'COMMIT', query_timeout: config.query_timeout });
      return result;
    });
  }

  private get acquireTimeoutMs(): number {
    return this.options.leaseTimeoutMs - this.options.safetyMarginMs;
  }

  /**
   * Reads the default isolation of the application's sessions (bootstrap): when it is not READ COMMITTED, the
   * acquire, release and dequeue statements run in explicit READ COMMITTED transactions (two more round trips each;
   * under the usual default they stay one statement). Serialization failures are retried either way.
   */
  async checkIsolation(): Promise<string> {
    const result = await this.pooled.query<{ isolation: string }>({
      text: `SELECT current_setting('default_transaction_isolation') AS isolation`,
    });
    const isolation = result.rows[0].isolation;
    this.isolationFraming = isolation !== 'read committed';
    return isolation;
  }

  /** Which lease objects are missing (bootstrap check). */
  async missingObjects(): Promise<string[]> {
    const result = await this.pooled.query<{ lease: boolean; waiter: boolean; seq: boolean; wseq: boolean }>({
      text: `SELECT to_regclass($1) IS NOT NULL AS lease, to_regclass($2) IS NOT NULL AS waiter,
        to_regclass($3) IS NOT NULL AS seq, to_regclass($4) IS NOT NULL AS wseq`,
      values: [this.n.lease, this.n.waiter, this.n.fencingSequence, this.n.waiterSequence],
    });
    const row = result.rows[0];
    const missing: string[] = [];
    if (!row.lease) missing.push(this.n.lease);
    if (!row.waiter) missing.push(this.n.waiter);
    if (!row.seq) missing.push(this.n.fencingSequence);
    if (!row.wseq) missing.push(this.n.waiterSequence);
    return missing;
  }

  /**
   * The rights the library needs at run time that the session's role lacks, e.g. `DELETE on "public"."job_lease"`.
   * No DDL and no ownership: the owner runs the migrations, the application's role only reads and writes rows.
   */
  async missingPrivileges(): Promise<{ role: string; missing: string[] }> {
    const { lease, waiter, fencingSequence, waiterSequence } = this.n;
    // [check function (a constant), object (bound), right (bound), how to name it]
    const checks: Array<[string, string, string, string]> = [
      ['has_schema_privilege', this.options.schema, 'USAGE', `USAGE on schema ${this.n.schema}`],
      ...['SELECT', 'INSERT', 'UPDATE', 'DELETE'].flatMap((right): Array<[string, string, string, string]> => [
        ['has_table_privilege', lease, right, `${right} on ${lease}`],
        ['has_table_privilege', waiter, right, `${right} on ${waiter}`],
      ]),
      ['has_sequence_privilege', fencingSequence, 'USAGE', `USAGE on sequence ${fencingSequence}`],
      ['has_sequence_privilege', waiterSequence, 'USAGE', `USAGE on sequence ${waiterSequence}`],
    ];
    const result = await this.db.query<{ role: string; granted: boolean[] }>({
      text: `SELECT current_user::text AS role,
        ARRAY[${checks.map(([fn], i) => `${fn}($${2 * i + 1}, $${2 * i + 2})`).join(', ')}] AS granted`,
      values: checks.flatMap(([, object, right]) => [object, right]),
    });
    const { role, granted } = result.rows[0];
    return { role, missing: checks.filter((_, i) => !granted[i]).map(([, , , name]) => name) };
  }

  /** Whether the session's role may create the lease objects: CREATE on the schema (on the database for a new one). */
  async mayCreateSchema(): Promise<{ role: string; allowed: boolean }> {
    const result = await this.db.query<{ role: string; allowed: boolean }>({
      text: `SELECT current_user::text AS role, CASE WHEN to_regnamespace($1) IS NULL
          THEN has_database_privilege(current_database(), 'CREATE')
          ELSE has_schema_privilege($2, 'CREATE') END AS allowed`,
      values: [this.n.schema, this.options.schema],
    });
    return result.rows[0];
  }

  /** Creates the objects (idempotent). */
  async createSchema(): Promise<void> {
    for (const statement of schemaStatements(this.options)) {
      await this.pooled.query({ text: statement });
    }
  }
}
