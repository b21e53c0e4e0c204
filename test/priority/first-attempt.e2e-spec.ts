/**
 * The first attempt of a waiting call (it acquires, or queues the caller, in one statement) against a row that
 * another transaction holds locked: an expired holder still inside `fenced()`, the case `fencedIdleTimeoutMs` is
 * sized for (issue 21 item 1). The call waits as long as it asked to, whatever that statement waits on; and a
 * statement the call gave up on never leaves a grant that nobody holds.
 */
import { randomUUID } from 'node:crypto';
import { LeaseWaitTimeoutError } from 'nest-pg-lease';
import type pg from 'pg';
import { adminClient, eventually, useTestDatabase } from '../support/db.js';
import { procsOf } from './helpers.js';

/** Timings with an acquisition bound (leaseTimeoutMs − safetyMarginMs = 9 s) far above the waiter timeout. */
const SLOW_LOCK = { timing: { heartbeatIntervalMs: 1_000, leaseTimeoutMs: 10_000, waiterTimeoutMs: 1_000 } };

/** A lease row of `key` whose holder expired an hour ago, locked by a transaction of `locker` until `unlock()`. */
async function expiredRowLocked(
  admin: pg.Client,
  locker: pg.Client,
  key: string,
): Promise<{ unlock: () => Promise<void> }> {
  await admin.query(
    `INSERT INTO job_lease (target_id, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at,
       updated_at, hold_ms)
     VALUES ($1, $2, 1, 'expired-holder', 0, 1000, now() - interval '1 hour', now() - interval '1 hour', 0)`,
    [key, randomUUID()],
  );
  await locker.query('BEGIN');
  await locker.query('SELECT 1 FROM job_lease WHERE target_id = $1 FOR UPDATE', [key]);
  return { unlock: () => locker.query('COMMIT').then(() => undefined) };
}

/** The lease row of `key` as the database sees it: whether someone holds it, and who. */
async function rowOf(admin: pg.Client, key: string): Promise<{ held: boolean; owner: string }> {
  const { rows } = await admin.query<{ held: boolean; owner: string }>(
    `SELECT lease_token IS NOT NULL AND updated_at + lease_timeout_ms * interval '1 ms' > clock_timestamp() AS held,
       owner FROM job_lease WHERE target_id = $1`,
    [key],
  );
  return rows[0];
}

describe('the first attempt of a waiting call', () => {
  const db = useTestDatabase('firstattempt');
  const proc = procsOf(db);
  let locker: pg.Client;
  beforeAll(async () => {
    locker = await adminClient(db.url);
    locker.on('error', () => undefined);
    db.beforeDrop(() => locker.end());
  });

  test('a waiting call keeps waiting while its first statement waits for a locked row', async () => {
    const waiter = await proc('patient', SLOW_LOCK);
    const { unlock } = await expiredRowLocked(db.admin, locker, 'locked:wait');
    const started = performance.now();
    const acquiring = waiter.service.acquire('locked:wait', { priority: 1, onBusy: { wait: { timeoutMs: 8_000 } } });
    setTimeout(() => void unlock(), 2_500);
    const lease = await acquiring;
    const waitedMs = performance.now() - started;
    expect(lease.isHeld()).toBe(true);
    expect(waitedMs).toBeGreaterThan(2_000);
    expect(await rowOf(db.admin, 'locked:wait')).toEqual({ held: true, owner: waiter.owner });
    await lease.release();
  });

  test('a waiting call that gives up leaves no grant behind once the lock goes', async () => {
    const waiter = await proc('hasty', SLOW_LOCK);
    const { unlock } = await expiredRowLocked(db.admin, locker, 'locked:give-up');
    const started = performance.now();
    await expect(
      waiter.service.acquire('locked:give-up', { priority: 1, onBusy: { wait: { timeoutMs: 500 } } }),
    ).rejects.toBeInstanceOf(LeaseWaitTimeoutError);
    expect(performance.now() - started).toBeLessThan(2_000);
    await unlock();
    // Whatever the abandoned statement did once the lock went, the key is not held by a lease nobody holds: not
    // granted at all, or granted and given back at once.
    await eventually(
      () => rowOf(db.admin, 'locked:give-up'),
      (row) => !row.held,
      'the key free again',
      3_000,
    );
    expect(waiter.service.heldLeases()).toEqual([]);
    // And it stays free: nothing of the abandoned call lands later.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect((await rowOf(db.admin, 'locked:give-up')).held).toBe(false);
    const { rows } = await db.admin.query('SELECT 1 FROM job_lease_waiter WHERE target_id = $1', ['locked:give-up']);
    expect(rows).toEqual([]);
  });
});
