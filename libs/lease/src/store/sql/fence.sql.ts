/** The first statement of a fenced transaction. */
import type { LeaseObjectNames } from './fragments.js';
import { forcedFree } from './operator.sql.js';

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
          ${timeline}::text AS timeline
        FROM prior p LEFT JOIN locked k ON true`;
}
