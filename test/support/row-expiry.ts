/**
 * When a dead holder's lease row expires, by the server's clock, against when its key was granted again: the rule
 * "no takeover before the row expired" checked on one clock, with nothing left to the timing of the test's process.
 * A renewal sent just before the holder died may still commit after it, and a heartbeat tick may come late on a
 * loaded machine, so the expiry is read from the row itself until the key changes hands.
 */
import type pg from 'pg';
import { sleep } from './sleep.js';

/** The row of `key` (slot 0) while it carries `fencingToken`: its expiry, read every 20 ms until `stop()`. */
export function watchExpiry(admin: pg.ClientBase, key: string, fencingToken: bigint | string) {
  let expiresAtMs = -Infinity;
  let stopped = false;
  const watching = (async () => {
    while (!stopped) {
      const { rows } = await admin.query<{ expires_ms: number }>(
        `SELECT extract(epoch FROM updated_at + lease_timeout_ms * interval '1 millisecond') * 1000 AS expires_ms
         FROM job_lease WHERE target_id = $1 AND slot = 0 AND fencing_token = $2`,
        [key, String(fencingToken)],
      );
      if (rows.length > 0) expiresAtMs = Math.max(expiresAtMs, Number(rows[0].expires_ms));
      await sleep(20);
    }
  })();
  return {
    /** Stops reading; resolves with the latest expiry seen (epoch ms, server clock; -Infinity if never seen). */
    stop: async (): Promise<number> => {
      stopped = true;
      await watching;
      return expiresAtMs;
    },
  };
}

/** When the grant carrying `fencingToken` was made (epoch ms, server clock). */
export async function acquiredAtMs(admin: pg.ClientBase, key: string, fencingToken: bigint | string): Promise<number> {
  const { rows } = await admin.query<{ acquired_ms: number }>(
    `SELECT extract(epoch FROM acquired_at) * 1000 AS acquired_ms FROM job_lease
     WHERE target_id = $1 AND slot = 0 AND fencing_token = $2`,
    [key, String(fencingToken)],
  );
  if (rows.length === 0) throw new Error(`no grant of ${key} with token ${String(fencingToken)}`);
  return Number(rows[0].acquired_ms);
}
