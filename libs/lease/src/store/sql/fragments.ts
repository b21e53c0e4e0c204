/**
 * The SQL fragments the statements share: liveness of a holder and of a waiter, holds, aging, the born-dead rule, the
 * head of a line, the one-row estimate of a batch. Pure: SQL text only.
 */
import type { leaseObjectNames } from '../../schema/lease-schema.js';

/** The quoted names of the lease objects (see `leaseObjectNames`). */
export type LeaseObjectNames = ReturnType<typeof leaseObjectNames>;

export const MS = `* interval '1 millisecond'`;

/** Lease row `alias` has a holder whose lease has not expired (database clock). */
export function live(alias: string): string {
  return `(${alias}.lease_token IS NOT NULL
    AND ${alias}.updated_at + ${alias}.lease_timeout_ms ${MS} > clock_timestamp())`;
}

/** The acquisition of lease row `alias` asked the target to stay taken until `hold_ms` after it (holdAtLeastMs). */
export function holding(alias: string): string {
  return `(${alias}.acquired_at + ${alias}.hold_ms ${MS} > clock_timestamp())`;
}

/**
 * The target of lease row `alias` is taken: by a live holder, or by the tail of a hold (released or not). A released
 * or expired row past its hold is free.
 */
export function taken(alias: string): string {
  return `(${live(alias)} OR ${holding(alias)})`;
}

/**
 * A column of an acquisition's final row that fails the statement when it has run longer than `capMs` (see
 * `acquireRunCapMs`): evaluated after the statement's writes (the row is read from them), before the commit.
 * `set_config` is volatile, so the failing cast is never folded at plan time.
 */
export function runCap(capMs: number): string {
  return `CASE WHEN clock_timestamp() - statement_timestamp() > ${capMs} ${MS}
    THEN set_config('nest_pg_lease.acquisition', 'nest-pg-lease: the acquisition ran past its cap of ${capMs} ms and was undone', true)::int END`;
}

/**
 * Effective priority of a waiter: its priority, plus one per `agingIntervalMs` waited since it first queued when
 * aging is on (the parameter is NULL when it is off). Database clock, one instant per statement, so every row of a
 * statement ages consistently.
 */
export function aged(queuedAt: string, agingParameter: string): string {
  const alias = queuedAt.split('.')[0];
  return `(${alias}.priority::bigint + CASE WHEN ${agingParameter}::bigint IS NULL THEN 0
    ELSE floor(extract(epoch FROM statement_timestamp() - ${queuedAt}) * 1000 / ${agingParameter}::bigint)::bigint END)`;
}

/** A waiter row whose heartbeat is recent enough. */
export function liveWaiter(alias: string): string {
  return `(${alias}.heartbeat_at + ${alias}.timeout_ms ${MS} > clock_timestamp())`;
}

/**
 * The first `heartbeat_at` of a row queued by an enqueue: it lives `bound` ms (≤ its `timeout`) from when the
 * statement reached the server, so a row landing after its caller gave up on the statement (given up after `bound`)
 * is born dead.
 */
export function bornWithin(timeout: string, bound: string): string {
  return `statement_timestamp() - (${timeout} - ${bound}::int) ${MS}`;
}

/**
 * A batch's callers travel as ONE jsonb parameter, filtered by a range the planner cannot judge; both are about the
 * plan cache (measured by the prototype of issue 14 part 1). `unnest($1::text[])` is estimated at the array's length
 * in a custom plan but at 10 rows in the generic one, so a prepared statement would be planned afresh on every call
 * (1.5 ms of planning for 0.5 ms of execution); `jsonb_to_recordset` costs the same in both and the generic plan is
 * kept. And a generic plan made while the table was small must still probe the primary key per caller rather than
 * hash the whole table: `i BETWEEN 1 AND 100000` (always true) is estimated at one row in every plan.
 */
export const ONE_ROW_ESTIMATE = 'WHERE r.i BETWEEN 1 AND 100000';

/**
 * Restricts `alias` (a lease or waiter row) to the keys of `source` (a CTE or relation with a `target_id` column), as an
 * index condition: `target_id = ANY` of an array the statement computes once. The joins of the lease table to a CTE on
 * the key carry it: a generic plan made while the table was nearly empty may put the table on the outer side of the
 * join, and without it that side walks the whole primary key (`test/lease/grown-table.e2e-spec.ts`). Where a statement
 * needs only the keys, an array replaces the join; the batched acquisition's deletes of waiter rows keep a plain join
 * (the condition cost more than it saved there: docs/performance.md, "Plans that probe by key").
 */
export function byKeys(alias: string, source: string): string {
  return `${alias}.target_id = ANY (ARRAY(SELECT target_id FROM ${source}))`;
}

/**
 * The next waiter of each target in `targets` (a relation with a `target_id` column): the one the next acquire
 * statement would let through — highest effective priority, then first queued, live, not `except`. $aging is the
 * aging interval parameter.
 */
export function headOf(n: LeaseObjectNames, target: string, aging: string, except?: string): string {
  return `(SELECT w.waiter_id FROM ${n.waiter} w WHERE w.target_id = ${target} AND ${liveWaiter('w')}
      ${except ? `AND w.waiter_id <> ${except}` : ''}
      ORDER BY ${aged('w.queued_at', aging)} DESC, w.seq LIMIT 1)`;
}
