/**
 * Direct handoff: a statement that gives up a lease (a release, a waiter leaving with a grant it never confirmed)
 * grants the target to the head of its line in the same statement and commit, and the head-only NOTIFY carries the
 * grant. Pure: SQL text only.
 */
import { notifyGrantSql, notifyHeadSql } from '../../database/head-payload.js';
import { aged, byKeys, headOf, holding, live, liveWaiter, type LeaseObjectNames } from './fragments.js';
import { historyToken, sequenceLiteral } from './fencing-token.js';

export interface HandoffParameters {
  /** The timeline expression the grant's token carries (`timelineSql`). */
  readonly timeline: string;
  /** The aging interval parameter (NULL: off). */
  readonly aging: string;
  /** The head-only NOTIFY channel parameter (NULL: no NOTIFY). */
  readonly channel: string;
  /** A condition on waiter row `w` that excludes it from the grant (waiters leaving in the same statement). */
  readonly except?: string;
}

/**
 * The handoff of the lease rows of `locked` (a CTE of the caller with `target_id` and `holding`, keys' own rows — slot
 * 0 — locked by it: the leases given up). Defines the CTEs `head`, `drawn`, `freed`, `handed`, `taken`, `woke` and
 * `gave_up` (the rows freed or handed, with the fencing token of a grant):
 *
 * - `head`: the next waiter of each row whose last acquisition asked for no hold still running — live, highest
 *   effective priority, then first queued (the rule of the acquire statement, so no barging) — its row locked: a
 *   waiter leaving concurrently is either still there after its removal commits (no) or it is skipped for the next.
 * - `handed`: a row with a head is granted to it: lease token = its waiter id (the waiter knows it), its owner and
 *   priority, a fencing token drawn after the row lock (the caller locked it), and the life of its waiter row (its
 *   waiter timeout, from now): a grant its waiter never confirms (it died after its last heartbeat) is free again
 *   within that bound, not a lease timeout — and never sooner than the row itself would have been skipped as dead.
 *   The waiter's row goes with the grant. Only with NOTIFY on (`channel` not NULL): a waiter that only polls would
 *   find its grant a poll interval late, so there the row is freed and the waiter acquires it as before.
 * - `freed`: any other row is released (token cleared, row kept with its fencing token).
 * - `woke`: the grant travels in the NOTIFY, `<waiter id>/<fencing token> <key>`; a freed row whose hold's tail
 *   keeps the target taken still names its head (`<waiter id> <key>`), which retries when the tail ends.
 */
export function handoffCtes(n: LeaseObjectNames, locked: string, p: HandoffParameters): string {
  const { lease, waiter, fencingSequence } = n;
  return `head AS MATERIALIZED (
      SELECT w.target_id, w.waiter_id, w.owner, w.priority, w.timeout_ms FROM ${locked} k
      CROSS JOIN LATERAL (
        SELECT w.* FROM ${waiter} w
        WHERE w.target_id = k.target_id AND ${liveWaiter('w')}${p.except ? ` AND NOT (${p.except})` : ''}
        ORDER BY ${aged('w.queued_at', p.aging)} DESC, w.seq LIMIT 1
        FOR UPDATE OF w) w
      WHERE NOT k.holding AND ${p.channel}::text IS NOT NULL
    ), drawn AS MATERIALIZED (
      -- The grant's token, drawn after the row lock, once per row whichever plan joins it below.
      SELECT hd.*, nextval(${sequenceLiteral(fencingSequence)}) AS v FROM head hd
    ), handed AS (
      UPDATE ${lease} AS l SET lease_token = x.waiter_id, fencing_token = ${historyToken('x.v', 'l.fencing_token')}, owner = x.owner,
        priority = x.priority, lease_timeout_ms = x.timeout_ms,
        acquired_at = clock_timestamp(), updated_at = clock_timestamp(), hold_ms = 0
      FROM drawn x, (SELECT ${p.timeline} AS timeline) h
      WHERE l.target_id = x.target_id AND l.slot = 0 AND ${byKeys('l', 'drawn')}
      RETURNING l.target_id, x.waiter_id, l.fencing_token
    ), freed AS (
      UPDATE ${lease} AS l SET lease_token = NULL
      WHERE l.slot = 0 AND l.target_id = ANY (ARRAY(SELECT k.target_id FROM ${locked} k
        WHERE NOT EXISTS (SELECT 1 FROM head hd WHERE hd.target_id = k.target_id)))
      RETURNING l.target_id
    ), taken AS (
      DELETE FROM ${waiter} w USING handed x
      WHERE w.target_id = x.target_id AND w.waiter_id = x.waiter_id AND ${byKeys('w', 'handed')}
    ), woke AS (
      SELECT ${notifyGrantSql(p.channel, 'x.waiter_id', 'x.fencing_token', 'x.target_id')}
      FROM handed x WHERE ${p.channel}::text IS NOT NULL
      UNION ALL
      SELECT ${notifyHeadSql(p.channel, 'hw.waiter_id', 'hw.target_id')}
      FROM (SELECT f.target_id, ${headOf(n, 'f.target_id', p.aging)} AS waiter_id FROM freed f) hw
      WHERE ${p.channel}::text IS NOT NULL AND hw.waiter_id IS NOT NULL
    ), gave_up AS (
      SELECT target_id, fencing_token FROM handed UNION ALL SELECT target_id, NULL FROM freed
    )`;
}

/** The `locked` row source of `handoffCtes` for lease row `alias`. */
export function givenUp(alias: string): string {
  return `${alias}.target_id, ${holding(alias)} AS holding`;
}

/**
 * A waiter confirms the grant a handoff gave it (see `handoffCtes`): $1 target, $2 its waiter id (the grant's lease
 * token), $3 its lease timeout, $4 its hold. The grant becomes its lease — its own timeout and hold, renewed from now —
 * if it is still live; a row it queued again meanwhile (a heartbeat that found its row gone before the NOTIFY came)
 * goes. No row: the grant was passed on (it came too late) and the waiter queues again.
 *
 * Durable, like an acquisition (the session's `synchronous_commit = on`): its answer starts the holder's lease, whose
 * local deadline counts a lease timeout from when it was sent, so the row must say the same after a crash. A commit
 * lost with the server would leave the grant's waiter timeout, and the key free to another process while the holder
 * still holds it. Its flush also flushes the grant before it (the release's commit, which `asyncReleaseCommits` may
 * have left unflushed). A confirmation that fails, or whose answer is lost, gives the waiter no lease: its next
 * attempt (the acquire statement, which confirms a grant it finds the same way) tries again.
 */
export function confirmGrantSql(n: LeaseObjectNames): string {
  return `WITH given AS (
      UPDATE ${n.lease} AS l SET lease_timeout_ms = $3, hold_ms = $4, updated_at = clock_timestamp()
      WHERE l.target_id = $1 AND l.slot = 0 AND l.lease_token = $2::uuid AND ${live('l')}
      RETURNING l.fencing_token
    ), stray AS (
      DELETE FROM ${n.waiter} w WHERE w.target_id = $1 AND w.waiter_id = $2::uuid AND EXISTS (SELECT 1 FROM given)
    )
    SELECT fencing_token::text AS fencing_token FROM given`;
}
