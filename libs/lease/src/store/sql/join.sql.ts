/**
 * The statements of joins across processes (`onBusy: 'join'`): a run's outcome saved in its fenced transaction, and
 * a joiner's look at the target (the run it may join, or when a hold's tail ends). Pure: SQL text only.
 */
import { notifyKeySql } from '../../database/head-payload.js';
import { holding, type LeaseObjectNames, live, MS } from './fragments.js';

/** Expired results one save deletes at most (a bounded statement, whatever piled up). */
export const EXPIRED_PER_SAVE = 100;

/**
 * Saves the outcome of the run holding (target $1, fencing token $2) — inside its fenced transaction, so only while
 * its lease is the current one — for $4 ms (database clock), deletes up to `EXPIRED_PER_SAVE` expired results of any
 * target (never waiting for a locked one), and wakes the joiners (the NOTIFY is delivered at the commit).
 */
export function saveResultSql(n: LeaseObjectNames): string {
  return `WITH expired AS (
      DELETE FROM ${n.result} WHERE (target_id, fencing_token) IN (
        SELECT target_id, fencing_token FROM ${n.result} WHERE expires_at <= now()
        LIMIT ${EXPIRED_PER_SAVE} FOR UPDATE SKIP LOCKED)
    ), saved AS (
      INSERT INTO ${n.result} (target_id, fencing_token, outcome, expires_at)
      VALUES ($1, $2::bigint, $3, now() + $4::int ${MS})
      ON CONFLICT (target_id, fencing_token) DO NOTHING
    )
    SELECT ${notifyKeySql('$5', '$1')}`;
}

/**
 * A joiner's look at target $1: the fencing token of its row, whether that holder is live, the unexpired outcome
 * stored under token $2 (the run joined; the row's own token when $2 is null), and, when no live holder is left and
 * only a hold's tail keeps the target taken, when that tail ends (ms, database clock: no NOTIFY will say so).
 */
export function readResultSql(n: LeaseObjectNames): string {
  return `SELECT l.fencing_token::text AS token, ${live('l')} AS live, r.outcome,
      CASE WHEN NOT ${live('l')} AND ${holding('l')}
        THEN (extract(epoch FROM l.acquired_at + l.hold_ms ${MS} - clock_timestamp()) * 1000)::float8 END
        AS hold_left_ms
    FROM ${n.lease} l
    LEFT JOIN ${n.result} r ON r.target_id = l.target_id
      AND r.fencing_token = coalesce($2::bigint, l.fencing_token) AND r.expires_at > now()
    WHERE l.target_id = $1 AND l.slot = 0`;
}
