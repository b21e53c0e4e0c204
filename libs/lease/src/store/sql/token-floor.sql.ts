/**
 * What keeps fencing tokens rising on a server whose sequences stand below the tokens in its tables: a new database
 * cluster the lease tables were copied to by logical replication (a blue/green switchover; PostgreSQL 10–18 copy rows,
 * never sequence values), or restored into. Pure: SQL text only. docs/failover.md, "Blue/green switchover".
 *
 * - Each grant is floored at the key's last token (`historyToken`'s `floor`: the row's own token), and a key's first
 *   row at the high-water mark the purge leaves (`highWaterToken`): per key, no token goes back, whatever the sequence.
 * - The sequences are raised above the tables' largest token and place (`raiseSequencesSql`) at bootstrap and when a
 *   renewal finds another system identifier: from then on every token is above every token in the tables.
 */
import { FENCING_SEQUENCE_BITS, sequenceLiteral } from './fencing-token.js';
import type { LeaseObjectNames } from './fragments.js';

/**
 * The lease row that carries the high-water mark of purged rows: `(U+001F, -1)`. The slot makes it: -1 is no slot of
 * any key (a key's own row is 0, a semaphore's 1 … limit), so the key is free for callers; U+001F is the key it had
 * before the slot column (whose migration only set its slot). It never holds a lease (its lease token is null), the purge
 * never deletes it, `list()` never shows it.
 */
export const HIGH_WATER_KEY = 'chr(31)';

/** The high-water row's slot (see `HIGH_WATER_KEY`). */
export const HIGH_WATER_SLOT = -1;

/**
 * The high-water mark (NULL: nothing purged yet): at least every token the purge deleted. A key's first row is
 * floored at it (`historyToken`), so a purged key acquired again is above its deleted grants even where the sequence
 * stands below them. One primary-key probe, evaluated once per statement and only by a statement that inserts a row.
 */
export function highWaterToken(lease: string): string {
  return `(SELECT hw.fencing_token FROM ${lease} hw WHERE hw.target_id = ${HIGH_WATER_KEY} AND hw.slot = ${HIGH_WATER_SLOT})`;
}

/**
 * Raises the high-water mark to `token` (an SQL expression, at least every token deleted in the same statement) when
 * `when` holds. A CTE body for the purge statement (see `purgeSql`): the mark commits with the deletes, so a server
 * that receives the deletes (a logical replica) receives the mark too.
 */
export function raiseHighWaterSql(lease: string, token: string, when: string): string {
  return `INSERT INTO ${lease} AS l
        (target_id, slot, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at, updated_at, hold_ms)
      SELECT ${HIGH_WATER_KEY}, ${HIGH_WATER_SLOT}, NULL, ${token}, 'nest-pg-lease: purged up to this token', 0, 1,
        clock_timestamp(), clock_timestamp(), 0
      WHERE ${when}
      ON CONFLICT (target_id, slot) DO UPDATE SET fencing_token = greatest(l.fencing_token, EXCLUDED.fencing_token),
        updated_at = EXCLUDED.updated_at`;
}

/** How far above the tables a raise sets a sequence: room for grants floored meanwhile (see `raiseSequencesSql`). */
export const RAISE_MARGIN = 1n << 20n;

/**
 * Raises each lease sequence that stands at or below the largest value of its kind in the tables, on the timeline new
 * tokens carry: $1 that timeline, $2 the largest fencing token, $3 the largest waiter place (see `tableTopsSql`; NULL:
 * none). A value of an earlier timeline is below every new one already; in recovery nothing is raised.
 *
 * - One raiser at a time (an advisory lock for the transaction): two processes starting at once on a new server must
 *   not both read the sequence low and the second set it back below what the first one's grants drew since. A raise
 *   reads where the sequence stands only once it holds the lock.
 * - The sequence is set `RAISE_MARGIN` above the largest value: grants floored at their row meanwhile (each one above
 *   the row's last token, see `historyToken`) stay below what the sequence draws next.
 * - `setval` needs UPDATE on the sequence; a role without it raises nothing (`raised_to` null) and the caller says
 *   what to run. Where nothing is behind, no right beyond USAGE is needed (`pg_sequence_last_value` takes USAGE).
 *
 * One row per sequence that stood behind: its kind, name, where it stood (null: never drawn), the value it must pass,
 * and where it stands now (null: not raised).
 */
export function raiseSequencesSql(n: LeaseObjectNames): string {
  const mask = (1n << FENCING_SEQUENCE_BITS) - 1n;
  const fencing = sequenceLiteral(n.fencingSequence);
  return `WITH locked AS MATERIALIZED (
      SELECT 1 AS one FROM (SELECT pg_advisory_xact_lock(hashtext(${fencing}), hashtext('raise'))) l
      WHERE NOT pg_is_in_recovery()
    ), stood AS MATERIALIZED (
      -- Read under the lock: the expression needs the locked row first.
      SELECT s.kind, s.name, s.top & ${mask} AS top,
        CASE WHEN k.one = 1 THEN pg_sequence_last_value(s.name::regclass) END AS last,
        has_sequence_privilege(s.name, 'UPDATE') AS may
      FROM locked k, (VALUES ('fencing', ${fencing}, $2::bigint),
        ('waiter', ${sequenceLiteral(n.waiterSequence)}, $3::bigint)) s(kind, name, top)
      WHERE s.top >> ${FENCING_SEQUENCE_BITS} = $1::bigint
    )
    SELECT kind, name, last::text AS stood, top::text AS above,
      CASE WHEN may THEN setval(name::regclass, least(top + ${RAISE_MARGIN}, ${mask}))::text END AS raised_to
    FROM stood
    WHERE coalesce(last, 0) < top`;
}

/**
 * What the owner of the tables runs where the role may not raise a sequence (see `raiseSequencesSql`): the sequence of
 * `kind` set `RAISE_MARGIN` above the largest value of its kind in the tables. No parameter (printed in a message).
 */
export function ownerRaiseSql(n: LeaseObjectNames, kind: 'fencing' | 'waiter'): string {
  const mask = (1n << FENCING_SEQUENCE_BITS) - 1n;
  const [sequence, table, column] =
    kind === 'fencing' ? [n.fencingSequence, n.lease, 'fencing_token'] : [n.waiterSequence, n.waiter, 'seq'];
  return `SELECT setval(${sequenceLiteral(sequence)}, (SELECT max(${column}) & ${mask} FROM ${table}) + ${RAISE_MARGIN})`;
}
