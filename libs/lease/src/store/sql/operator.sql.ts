/**
 * The operator's statements (docs/console.md): force-release, drains, the audit trail, the journal the
 * timeline is drawn from. Pure: SQL text only; every value a bound parameter.
 */
import { live, type LeaseObjectNames } from './fragments.js';

/**
 * What a force-release writes in the owner column of the row it frees (an owner is `host/pid/suffix`, never this):
 * the holder's next renewal or fenced transaction finds its token gone and this owner, and tells the loss apart
 * from a takeover (`released-by-operator`). The next acquisition overwrites it.
 */
export const FORCED_OWNER = '(released by operator)';

/** The row `alias` was freed by an operator and nobody acquired it since. */
export function forcedFree(alias: string): string {
  return `(${alias}.lease_token IS NULL AND ${alias}.owner = '${FORCED_OWNER}')`;
}

/**
 * $1 target, $2 actor, $3 reason. Ends the current grant (live or expired) of the key's own row (slot 0: a
 * semaphore's slots end with their holders) and writes the audit row, in one statement (one transaction): either
 * both or neither. The fencing sequence is not touched: the next acquisition draws a larger token anyway, and the
 * freed row keeps the ended grant's token for the record.
 */
export function forceReleaseSql(n: LeaseObjectNames): string {
  return `WITH old AS MATERIALIZED (
      SELECT target_id, owner, fencing_token, ${live('l')} AS live FROM ${n.lease} l
      WHERE l.target_id = $1 AND l.slot = 0 AND l.lease_token IS NOT NULL
      FOR UPDATE OF l
    ), forced AS (
      UPDATE ${n.lease} l SET lease_token = NULL, owner = '${FORCED_OWNER}', hold_ms = 0
      FROM old WHERE l.target_id = $1 AND l.slot = 0
      RETURNING old.owner, old.fencing_token, old.live
    ), audit AS (
      INSERT INTO ${n.audit} (action, kind, subject, actor, reason, fencing_token, holder)
      SELECT 'force-release', 'key', $1, $2, $3, f.fencing_token, f.owner
      FROM (SELECT 1) one LEFT JOIN forced f ON true
      RETURNING at
    )
    SELECT f.owner, f.fencing_token::text AS fencing_token, f.live, a.at FROM audit a LEFT JOIN forced f ON true`;
}

/** $1 kind, $2 subject, $3 actor, $4 reason: the drain (refreshed when already in force) and its audit row. */
export function drainSql(n: LeaseObjectNames): string {
  return `WITH d AS (
      INSERT INTO ${n.drain} (kind, subject, actor, reason) VALUES ($1, $2, $3, $4)
      ON CONFLICT (kind, subject) DO UPDATE SET actor = EXCLUDED.actor, reason = EXCLUDED.reason
      RETURNING at
    ), audit AS (
      INSERT INTO ${n.audit} (action, kind, subject, actor, reason) VALUES ('drain', $1, $2, $3, $4)
    )
    SELECT at FROM d`;
}

/** $1 kind, $2 subject, $3 actor, $4 reason: removes the drain, audited whether or not one was in force. */
export function undrainSql(n: LeaseObjectNames): string {
  return `WITH d AS (
      DELETE FROM ${n.drain} WHERE kind = $1 AND subject = $2 RETURNING 1
    ), audit AS (
      INSERT INTO ${n.audit} (action, kind, subject, actor, reason) VALUES ('undrain', $1, $2, $3, $4)
    )
    SELECT count(*)::int AS removed FROM d`;
}

/** Every drain in force (a small table: read whole by every process's drain cache). */
export function drainsSql(n: LeaseObjectNames): string {
  return `SELECT kind, subject, actor, reason, at FROM ${n.drain} ORDER BY at, kind, subject`;
}

/** $1 how many: the newest audit rows, newest first. */
export function auditSql(n: LeaseObjectNames): string {
  return `SELECT id::text, at, action, kind, subject, actor, reason, fencing_token::text AS fencing_token, holder
    FROM ${n.audit} ORDER BY id DESC LIMIT $1`;
}

/** One batch of journal rows, column by column. */
export function journalInsertSql(n: LeaseObjectNames): string {
  return `INSERT INTO ${n.journal} (at, target_id, key_template, type, owner, fencing_token, detail)
    SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[])`;
}

/** $1 retention (ms), $2 batch: deletes at most $2 journal rows older than the retention. */
export function journalTrimSql(n: LeaseObjectNames): string {
  return `WITH old AS (
      SELECT id FROM ${n.journal} WHERE at < clock_timestamp() - $1 * interval '1 millisecond' ORDER BY at LIMIT $2
    ), gone AS (DELETE FROM ${n.journal} j USING old WHERE j.id = old.id RETURNING 1)
    SELECT count(*)::int AS trimmed FROM gone`;
}

/**
 * $1 target, $2 how many: the key's timeline, oldest first — journal rows (every process's lease events) and the
 * operator's force-releases of the key, the newest $2 of them.
 */
export function historySql(n: LeaseObjectNames): string {
  return `SELECT * FROM (
      SELECT at, type, owner, fencing_token::text AS fencing_token, detail FROM ${n.journal} WHERE target_id = $1
      UNION ALL
      SELECT at, 'force-release', actor, fencing_token::text, reason FROM ${n.audit}
      WHERE kind = 'key' AND subject = $1 AND action = 'force-release'
      ORDER BY at DESC LIMIT $2
    ) h ORDER BY at`;
}
