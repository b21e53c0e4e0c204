/** The first statement of a fenced transaction. */
import type { LeaseObjectNames } from './fragments.js';
import { forcedFree } from './operator.sql.js';
import { SAVED_SEQSCAN } from '../../database/exchange.js';

/**
 * Puts back the `enable_seqscan` an exchange saved before the lock was planned (a no-op when none was: a simple-query
 * message, behind a transaction pooler), so the work's statements run with the application's settings.
 */
const restoreScans = `set_config('enable_seqscan',
            coalesce(nullif(current_setting('${SAVED_SEQSCAN}', true), ''), current_setting('enable_seqscan')), true)`;

/**
 * First statement of a fenced transaction, sent in BEGIN's message with its values written in as literals (see
 * `FenceStore.lockStatement`): $1 target and $4 the slot of its row, $2 the idle bound of the transaction, $3 how long
 * the row lock may be waited for. The wait is bounded for this statement only: the
 * transaction's own `lock_timeout` is put back once the row is locked, so the work's statements keep the
 * application's settings. A role default of `synchronous_commit = off` is raised to `on` for the transaction: a
 * fenced write is the guarantee, and must be durable. `timeline` as `timelineSql`: the one new tokens carry.
 */
export function lockForFenceSql(n: LeaseObjectNames, timeline: string): string {
  return `WITH prior AS MATERIALIZED (
          SELECT current_setting('lock_timeout') AS lock_timeout, set_config('lock_timeout', $3, true) AS bounded
        ), locked AS MATERIALIZED (
          -- Depends on prior, so the bound is set before the row is locked.
          SELECT l.lease_token::text AS lease_token, ${forcedFree('l')} AS forced, l.preempt_of::text AS preempt_of
          FROM ${n.lease} l, prior
          WHERE l.target_id = $1 AND l.slot = $4 AND prior.bounded IS NOT NULL
          FOR UPDATE OF l
        )
        -- The join needs the locked row first: only then is the transaction's own bound put back.
        SELECT k.lease_token, k.forced IS TRUE AS forced, k.preempt_of, set_config('lock_timeout', p.lock_timeout, true) AS restored,
          set_config('idle_in_transaction_session_timeout', $2, true) AS idle_bound,
          CASE WHEN current_setting('synchronous_commit') = 'off'
            THEN set_config('synchronous_commit', 'on', true) END AS durable,
          ${restoreScans} AS scans,
          ${timeline}::text AS timeline
        FROM prior p LEFT JOIN locked k ON true`;
}

/**
 * First statement of a fenced transaction over several leases (`MultiLease.fenced()`), as `lockForFenceSql` for each
 * row: $1 the rows as a JSON array of `[target, slot]` pairs, in the global key order of the multi-key run, $2 and $3 as
 * there. The rows are locked one by one in that order (`ORDER BY` the array's ordinality under `FOR UPDATE`: the lock
 * node runs above the sort), so two such transactions over overlapping keys cannot deadlock. One row per pair, in the
 * array's order; a pair whose row is missing reads a null token.
 */
export function lockManyForFenceSql(n: LeaseObjectNames, timeline: string): string {
  return `WITH prior AS MATERIALIZED (
          SELECT current_setting('lock_timeout') AS lock_timeout, set_config('lock_timeout', $3, true) AS bounded
        ), wanted AS MATERIALIZED (
          SELECT w.pair->>0 AS target, (w.pair->>1)::integer AS slot, w.ord
          FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY w(pair, ord)
        ), locked AS MATERIALIZED (
          -- Depends on prior, so the bound is set before the first row is locked; locks in the given order.
          SELECT w.ord, l.lease_token::text AS lease_token, ${forcedFree('l')} AS forced, l.preempt_of::text AS preempt_of
          FROM ${n.lease} l JOIN wanted w ON l.target_id = w.target AND l.slot = w.slot, prior
          WHERE prior.bounded IS NOT NULL
          ORDER BY w.ord
          FOR UPDATE OF l
        ), restored AS MATERIALIZED (
          -- After every row is locked: the transaction's own bound put back.
          SELECT set_config('lock_timeout', p.lock_timeout, true) AS restored,
            set_config('idle_in_transaction_session_timeout', $2, true) AS idle_bound,
            CASE WHEN current_setting('synchronous_commit') = 'off'
              THEN set_config('synchronous_commit', 'on', true) END AS durable,
            ${restoreScans} AS scans
          FROM prior p WHERE (SELECT count(*) FROM locked) >= 0
        )
        SELECT k.lease_token, k.forced IS TRUE AS forced, k.preempt_of, r.restored, ${timeline}::text AS timeline
        FROM wanted w CROSS JOIN restored r LEFT JOIN locked k ON k.ord = w.ord
        ORDER BY w.ord`;
}
