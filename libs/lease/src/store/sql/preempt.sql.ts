/**
 * The statements of preemption (docs/preemption.md): the request a preempting caller writes on the holder's row,
 * and the takeover it commits when the holder has not released within the grace. Pure: SQL text only; every value a
 * bound parameter.
 *
 * Who may preempt whom, in both: a holder of strictly lower priority (the priority its acquisition wrote in the row),
 * and only a caller no live waiter is ahead of (the acquire statement's no-barging rule: effective priority, then
 * place in line). The request is `preempt_of = <the holder's lease token>`: the holder's renewals and fenced
 * transactions find it — before the takeover (the row still carries its token) as after it (the column keeps the
 * ended grant's token) — and end its lease as `preempted`. A lease token is never reused, so a stale value names
 * nobody.
 */
import { sequenceLiteral, historyToken } from './fencing-token.js';
import { aged, live, liveWaiter, runCap, type LeaseObjectNames } from './fragments.js';

/**
 * The line of `$1` and the caller's effective priority (`$me`: its waiter id, `$seq` its seq, `$priority` its
 * priority, `$aging` the aging interval), and whether a live waiter other than the caller is ahead of it.
 */
function lineRule(n: LeaseObjectNames, me: string, seq: string, priority: string, aging: string) {
  const ctes = `line AS MATERIALIZED (
      SELECT w.waiter_id, w.seq, ${aged('w.queued_at', aging)} AS eff FROM ${n.waiter} w
      WHERE w.target_id = $1 AND ${liveWaiter('w')}
    ), me AS (
      SELECT coalesce((SELECT eff FROM line WHERE waiter_id = ${me}::uuid), ${priority}::bigint) AS eff
    )`;
  const ahead = `EXISTS (SELECT 1 FROM line a, me WHERE a.waiter_id IS DISTINCT FROM ${me}::uuid
      AND (a.eff > me.eff OR (a.eff = me.eff AND a.seq < coalesce(${seq}::bigint, 9223372036854775807))))`;
  return { ctes, ahead };
}

/**
 * The request: $1 target, $2 the caller's priority, $3 its waiter id, $4 its waiter seq, $5 the aging interval. Marks
 * the live holder's row when the caller may preempt it, and returns the holder's grant (none when it may not, or
 * the row is locked now — by the holder's fenced transaction, say: never waited for, asked again at the next wake).
 */
export function preemptAskSql(n: LeaseObjectNames): string {
  const { ctes, ahead } = lineRule(n, '$3', '$4', '$2', '$5');
  return `WITH ${ctes}, asked AS MATERIALIZED (
      SELECT l.target_id, l.lease_token, l.fencing_token, l.owner, l.priority FROM ${n.lease} l
      WHERE l.target_id = $1 AND l.slot = 0 AND ${live('l')} AND l.priority < $2 AND NOT ${ahead}
      FOR NO KEY UPDATE OF l SKIP LOCKED
    ), marked AS (
      UPDATE ${n.lease} l SET preempt_of = a.lease_token FROM asked a WHERE l.target_id = $1 AND l.slot = 0
      RETURNING 1
    )
    SELECT a.lease_token::text AS lease_token, a.fencing_token::text AS fencing_token, a.owner, a.priority
    FROM asked a`;
}

/**
 * The takeover at the end of the grace: $1 target, $2 the new lease token, $3 owner, $4 priority, $5 lease timeout,
 * $6 the caller's waiter id, $7 its seq, $8 aging interval, $9 holdAtLeastMs, $10 the lease token of the grant it
 * asked to stop. Granted only while that grant still holds the row (a release, a takeover or an expiry since ends
 * the request: the caller asks again), it was asked (`preempt_of`), and no live waiter is ahead of the caller.
 *
 * The row lock is waited for (within the statement's bound): a fenced transaction of the holder in flight commits
 * first — before the grant, so its writes are legitimate — and every fenced transaction that locks the row after the
 * commit finds another token. The fencing token is drawn after the lock (`locked` is materialized first): larger
 * than every earlier grant of the key. The caller's waiter row, and dead waiters, go with the grant.
 */
export function preemptTakeSql(n: LeaseObjectNames, timeline: string, capMs: number): string {
  const { ctes, ahead } = lineRule(n, '$6', '$7', '$4', '$8');
  return `WITH ${ctes}, locked AS MATERIALIZED (
      SELECT l.target_id, l.owner AS previous_owner, l.fencing_token AS previous_token, l.priority AS previous_priority
      FROM ${n.lease} l
      WHERE l.target_id = $1 AND l.slot = 0 AND l.lease_token = $10::uuid AND l.preempt_of = $10::uuid
        AND l.priority < $4
        AND NOT ${ahead}
      FOR NO KEY UPDATE OF l
    ), drawn AS MATERIALIZED (
      -- After the row lock, once per row whichever plan joins it below.
      SELECT k.*, nextval(${sequenceLiteral(n.fencingSequence)}) AS v FROM locked k
    ), won AS (
      UPDATE ${n.lease} AS l SET lease_token = $2::uuid, fencing_token = ${historyToken('x.v', 'l.fencing_token')}, owner = $3,
        priority = $4, lease_timeout_ms = $5, acquired_at = clock_timestamp(), updated_at = clock_timestamp(),
        hold_ms = $9
      FROM drawn x, (SELECT ${timeline} AS timeline) h
      WHERE l.target_id = $1 AND l.slot = 0
      RETURNING l.fencing_token, x.previous_owner, x.previous_token, x.previous_priority
    ), granted AS (
      DELETE FROM ${n.waiter} w
      WHERE w.target_id = $1 AND EXISTS (SELECT 1 FROM won) AND (w.waiter_id = $6::uuid OR NOT ${liveWaiter('w')})
    )
    SELECT won.fencing_token::text AS fencing_token, won.previous_owner, won.previous_token::text AS previous_token,
      won.previous_priority, ${runCap(capMs)} AS overran
    FROM won`;
}
