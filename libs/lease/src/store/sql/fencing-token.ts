/**
 * The fencing token layout, written once: `(timeline << 47) | sequence value`, and the server's history it is
 * compared with. Pure: SQL text only.
 */

/** Bits of a fencing token below the timeline: `token = (timeline << 47) | sequence value` (16 timeline bits). */
export const FENCING_SEQUENCE_BITS = 47n;

/**
 * `SEQUENCE_FLOOR` (2^40) is the first value of both sequences in this layout (their MINVALUE). The layout before it,
 * `(timeline << 40) | n`, built its tokens from values below it: on sequences past it a process of that version draws
 * NULL (its NOT NULL column refuses it, nothing is written) instead of a token below the new ones. The MINVALUE also
 * marks migrated sequences (see `MISSING_OBJECTS_SQL`).
 */
export { SEQUENCE_FLOOR } from '../../options/limits.js';

/** Timelines a token can carry: 2^16 (a bigint has 63 bits of magnitude). */
export const TIMELINE_LIMIT = 1n << (63n - FENCING_SEQUENCE_BITS);

/** The timeline of the server history a fencing token was drawn in (0 for tokens of versions before the layout). */
export function timelineOf(fencingToken: bigint): bigint {
  return fencingToken >> FENCING_SEQUENCE_BITS;
}

/**
 * The timeline of the server's WAL: the first 8 hex digits of the current WAL file's name. Any role may call both
 * functions; a promoted standby reports its new timeline at once (`pg_control_checkpoint()` lags until the next
 * checkpoint). Fails in recovery.
 */
export const TIMELINE = `('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint`;

/**
 * The timeline expression the statements use, an argument of every builder that draws a number or reads the history:
 * the server's (`TIMELINE`), or, for a server whose WAL functions the role may not call (see `WAL_READABLE_SQL`) or
 * whose tables come from a longer history (see `settleTokens`), a constant fixed at bootstrap to the largest timeline
 * already in the tables (at least 1), so every new token stays above every token the tables hold, and no timeline
 * change is ever seen (the timeline guard is off). The WAL probe always calls the server's.
 */
export function timelineSql(fixed?: bigint): string {
  return fixed === undefined ? TIMELINE : `(${fixed}::bigint)`;
}

/** Whether the role may call both WAL functions of `TIMELINE` (a right is checked when a statement starts). */
export const WAL_READABLE_SQL = `SELECT has_function_privilege('pg_catalog.pg_current_wal_lsn()', 'EXECUTE')
        AND has_function_privilege('pg_catalog.pg_walfile_name(pg_lsn)', 'EXECUTE') AS readable`;

/** Calls the WAL functions once (a server may refuse them although the role has the right: Aurora). */
export const WAL_PROBE_SQL = `SELECT CASE WHEN NOT pg_is_in_recovery() THEN ${TIMELINE}::text END AS timeline`;

/**
 * The largest fencing token and the largest waiter place in the tables (null: none), as text: the largest timeline
 * there (the fixed timeline of `fixedTimeline`), and where the sequences must stand (see `raiseSequencesSql`).
 * $1-free; the table names spliced in are quoted. A scan of both tables, once per bootstrap.
 */
export function tableTopsSql(lease: string, waiter: string): string {
  return `SELECT (SELECT max(fencing_token) FROM ${lease})::text AS token, (SELECT max(seq) FROM ${waiter})::text AS seq`;
}

/**
 * The server's history, in one row. `pg_control_system()` is executable by PUBLIC on a stock server, but a managed
 * service may revoke it, and a function's right is checked when the statement starts, whichever branch runs: so the
 * statement reads the system identifier only where the role may (see `LeaseStore.systemIdReadable`); elsewhere it is
 * null, and the timeline and the recovery state decide alone.
 */
export function serverHistorySql(readSystemId: boolean, timeline: string): string {
  const systemId = readSystemId ? '(SELECT system_identifier FROM pg_catalog.pg_control_system())::text' : 'NULL::text';
  return `SELECT pg_is_in_recovery() AS recovery,
    CASE WHEN NOT pg_is_in_recovery() THEN ${timeline}::text END AS timeline, ${systemId} AS system_id`;
}

/**
 * A number drawn from `sequence` that orders across failovers: `(timeline << 47) | nextval`. After an asynchronous
 * failover the sequence resumes from what the standby had received, so its plain values can go back; the promoted
 * server's timeline is larger, so these numbers never do. Tokens of the layouts before this one (plain values below
 * 2⁴⁰, then `(timeline << 40) | n` on timelines below 128, which the layout migration checks) stay below every new
 * one. The sequence is not reset by a failover: it has 2⁴⁷ − 2⁴⁰ values for the life of the table. A value that
 * would not fit its 47 bits (or a timeline past 2¹⁶, which would overflow a bigint) gives NULL, which the
 * column's NOT NULL refuses: nothing is written and the caller reports it (`exhausted`), rather than a number that
 * spills into the timeline bits. One expression for the fencing token and the waiter order, so both carry it.
 * `sequence` is a quoted name, spliced as a string literal; `timeline` as `timelineSql`; `floor` as in `historyToken`.
 */
export function historyOrdered(sequence: string, timeline: string, floor?: string): string {
  return `(SELECT ${historyToken('s.v', floor)}
    FROM (SELECT nextval(${sequenceLiteral(sequence)}) AS v) s, (SELECT ${timeline} AS timeline) h)`;
}

/** A quoted sequence name as the string literal `nextval` takes. */
export function sequenceLiteral(sequence: string): string {
  return `'${sequence.replace(/'/g, "''")}'`;
}

/**
 * `historyOrdered` for the rows of a set-based statement: `v`, a sequence value drawn for the row at the top level of
 * a row source (never in a sub-select: an uncorrelated one is evaluated once per statement and would give every row
 * of a batch the same number), combined with the timeline of the statement's `history h`. A source an UPDATE joins
 * is a MATERIALIZED CTE (`drawn`): a nested loop scans its inner side again per outer row, and would draw again.
 *
 * `floor`: a token the new one must be above (NULL: none) — the grant's own row's (`l.fencing_token`, the key's last
 * grant) or the high-water mark of purged rows (`highWaterToken`, for a key's first row). A server whose sequence
 * stands below the tokens in its tables (a blue/green switchover by logical replication copies rows, never sequence
 * values) still grants each key above its earlier grants; the sequences themselves are raised at bootstrap and when
 * a renewal finds another system (`raiseSequencesSql`). A floor whose successor would not fit its 47 bits gives NULL,
 * as an exhausted sequence does.
 */
export function historyToken(v: string, floor?: string): string {
  const limit = 1n << FENCING_SEQUENCE_BITS;
  const token = `(h.timeline << ${FENCING_SEQUENCE_BITS}) | ${v}`;
  return floor === undefined
    ? `CASE WHEN ${v} BETWEEN 0 AND ${limit - 1n} AND h.timeline < ${TIMELINE_LIMIT}
      THEN ${token} END`
    : `CASE WHEN ${v} BETWEEN 0 AND ${limit - 1n} AND h.timeline < ${TIMELINE_LIMIT}
        AND coalesce(${floor}, 0) & ${limit - 1n} < ${limit - 1n}
      THEN greatest(${token}, ${floor} + 1) END`;
}
