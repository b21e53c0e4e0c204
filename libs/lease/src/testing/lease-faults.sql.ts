/**
 * The statements of the testing kit's fault helpers (`lease-faults.ts`), pure text over the deployment's names. They
 * write as another process would: a takeover is a new grant with a token drawn from the fencing sequence. Each acts on
 * a key's own row (slot 0: its single holder's); `expire` also on its held slot rows.
 */
import { leaseObjectNames } from '../schema/lease-schema.js';
import type { LeaseNames } from '../options/lease-names.js';

/** $1 key, $2 owner: the row becomes another owner's grant with a higher fencing token (same timeline bits). */
export function takeOverSql(names: LeaseNames): string {
  const n = leaseObjectNames(names);
  return `UPDATE ${n.lease} SET lease_token = gen_random_uuid(), owner = $2,
      fencing_token = greatest(fencing_token + 1, ((fencing_token >> 40) << 40) | nextval('${n.fencingSequence.replace(/'/g, "''")}')),
      acquired_at = clock_timestamp(), updated_at = clock_timestamp(), hold_ms = 0
    WHERE target_id = $1 AND slot = 0 RETURNING fencing_token::text AS fencing_token`;
}

/**
 * $1 key: the row's last heartbeat moves back past its timeout (it is expired; its holder's token stays). So do the
 * key's other held rows (a semaphore's slots, a read-write key's readers and writer).
 */
export function expireSql(names: LeaseNames): string {
  const n = leaseObjectNames(names);
  return `UPDATE ${n.lease} SET updated_at = clock_timestamp() - (lease_timeout_ms + 1) * interval '1 millisecond',
      acquired_at = least(acquired_at, clock_timestamp() - (lease_timeout_ms + 1) * interval '1 millisecond')
    WHERE target_id = $1 AND (slot = 0 OR (slot > 0 AND lease_token IS NOT NULL)) RETURNING target_id`;
}

/** $1 key: locks the lease row until the transaction ends (renewals skip it; fenced writes wait for it). */
export function lockRowSql(names: LeaseNames): string {
  return `SELECT target_id FROM ${leaseObjectNames(names).lease} WHERE target_id = $1 AND slot = 0 FOR UPDATE`;
}
