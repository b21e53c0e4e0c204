/** The renewal statement of the lease heartbeat, with the server's history in the same round trip. */
import { live, type LeaseObjectNames } from './fragments.js';
import { serverHistorySql } from './fencing-token.js';
import { forcedFree } from './operator.sql.js';
import { NO_FAULTS, type StatementFaults } from './statement-faults.js';

/**
 * The renewal statement (see `renew`): `$1` the leases' keys, `$6` their rows' slots, `$2` their lease tokens, `$3`
 * their timelines (null: no history check), `$4` the system identifier they were acquired under, `$5` each lease's
 * own lease timeout (its call's, or the module's). Two texts per store, with and without reading the system
 * identifier; `timeline` as `timelineSql`.
 *
 * A renewal writes each lease's timeout as well as the time: a row left with another — a handed-over grant still
 * carries its waiter's timeout until its confirmation commits (see `confirmGrantSql`) — lives its holder's timeout
 * again from the first renewal, whatever happened to that commit; and one lease's length never becomes another's.
 */
export function renewSql(
  n: LeaseObjectNames,
  readSystemId: boolean,
  timeline: string,
  faults: StatementFaults = NO_FAULTS,
): string {
  const { lease } = n;
  // The test-only defect renewOneLength (statement-faults.ts): the first lease's timeout for every row.
  const length = faults.renewOneLength === true ? '($5::int[])[1]' : 'lockable.lease_timeout_ms';
  return `WITH here AS MATERIALIZED (${serverHistorySql(readSystemId, timeline)}),
    mine AS (
      -- Without history ($3 null) the timelines are null: unnest pads a missing array.
      SELECT * FROM unnest($1::text[], $6::int[], $2::uuid[], $3::bigint[], $5::int[])
        AS m(target_id, slot, lease_token, timeline, lease_timeout_ms)
    ), current AS MATERIALIZED (
      -- Leases of the history the server is in: the same timeline, the same database cluster.
      SELECT mine.target_id, mine.slot, mine.lease_token, mine.lease_timeout_ms FROM mine, here
      WHERE $3::bigint[] IS NULL OR (NOT here.recovery AND mine.timeline = here.timeline::bigint
        AND ($4::text IS NULL OR here.system_id IS NULL OR here.system_id = $4::text))
    ), lockable AS MATERIALIZED (
      SELECT l.target_id, l.slot, c.lease_timeout_ms FROM ${lease} l
      JOIN current c ON l.target_id = c.target_id AND l.slot = c.slot AND l.lease_token = c.lease_token
      WHERE ${live('l')}
      FOR NO KEY UPDATE OF l SKIP LOCKED
    ), renewed AS (
      UPDATE ${lease} AS l SET updated_at = clock_timestamp(), lease_timeout_ms = ${length} FROM lockable
      WHERE l.target_id = lockable.target_id AND l.slot = lockable.slot
      RETURNING l.lease_token
    )
    SELECT mine.lease_token::text AS lease_token,
      CASE WHEN c.lease_token IS NULL THEN 'failover'
        -- Asked to stop by a preempting caller, or taken over by it since (docs/preemption.md).
        WHEN l.preempt_of = mine.lease_token THEN 'preempted'
        WHEN r.lease_token IS NOT NULL THEN 'kept'
        WHEN ${forcedFree('l')} THEN 'forced'
        WHEN l.lease_token IS DISTINCT FROM mine.lease_token THEN 'lost'
        WHEN ${live('l')} THEN 'skipped'
        ELSE 'expired' END AS outcome,
      here.recovery, here.timeline, here.system_id
    FROM mine CROSS JOIN here
    LEFT JOIN current c ON c.lease_token = mine.lease_token
    LEFT JOIN renewed r ON r.lease_token = mine.lease_token
    LEFT JOIN ${lease} l ON l.target_id = mine.target_id AND l.slot = mine.slot`;
}
