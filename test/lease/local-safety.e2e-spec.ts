import { LeaseLostError, type LeaseEvent } from 'nest-pg-lease';
import type pg from 'pg';
import { adminClient, createTestDatabase, startService, useTestDatabase } from '../support/db.js';

/**
 * The guarantee of docs/guarantees.md: a holder that cannot renew treats its lease as lost once leaseTimeoutMs − safetyMarginMs has passed
 * since its last confirmed renewal was sent — before the database would let anyone take it over.
 */
// A 1 s margin leaves the test's own query (run after the abort) time to see the database lease still alive.
const OPTIONS = { timing: { heartbeatIntervalMs: 200, leaseTimeoutMs: 3_000, safetyMarginMs: 1_000 } };

describe('local safety', () => {
  const db = useTestDatabase('safety');
  let blocker: pg.Client;
  db.beforeDrop(() => blocker?.end());

  beforeAll(async () => {
    blocker = await adminClient(db.url);
  });

  const remainingDbMs = async (key: string) =>
    Number(
      (
        await db.admin.query(
          `SELECT extract(epoch FROM (updated_at + lease_timeout_ms * interval '1 millisecond') - clock_timestamp()) * 1000 AS remaining
           FROM job_lease WHERE target_id = $1`,
          [key],
        )
      ).rows[0].remaining,
    );

  test('renewals impossible (row locked by another session): the signal aborts before the lease expires', async () => {
    const a = await startService(db.url, OPTIONS);
    try {
      const lease = (await a.service.tryAcquire('blocked'))!;
      let lastRenewal = performance.now();
      const events: LeaseEvent[] = [];
      a.service.events$.subscribe((event) => {
        events.push(event);
        if (event.type === 'renewed') lastRenewal = performance.now();
      });
      await new Promise((resolve) => setTimeout(resolve, 500)); // a couple of good renewals first
      // Every renewal now skips the locked row (SKIP LOCKED): neither renewed nor lost, until the local deadline.
      await blocker.query('BEGIN');
      await blocker.query(`SELECT 1 FROM job_lease WHERE target_id = 'blocked' FOR UPDATE`);
      const lockedAt = performance.now();
      await new Promise<void>((resolve) => lease.signal.addEventListener('abort', () => resolve()));
      const abortedAt = performance.now();
      const remaining = await remainingDbMs('blocked');
      await blocker.query('ROLLBACK');

      expect(lease.signal.reason).toBeInstanceOf(LeaseLostError);
      expect((lease.signal.reason as LeaseLostError).reason).toBe('renewal-deadline');
      // Aborted before the lease timeout counted from the last confirmed renewal, and while the database still
      // considered the lease alive (nobody could have taken it over yet).
      expect(abortedAt - lastRenewal).toBeLessThan(OPTIONS.timing.leaseTimeoutMs);
      expect(abortedAt - lockedAt).toBeLessThan(OPTIONS.timing.leaseTimeoutMs);
      expect(remaining).toBeGreaterThan(0);
      const losses = events.filter((event) => event.type === 'lost');
      expect(losses).toEqual([expect.objectContaining({ reason: 'renewal-deadline' })]);
      console.log(
        `skipped renewals: aborted ${Math.round(abortedAt - lockedAt)} ms after the lock, ` +
          `${Math.round(remaining)} ms before the database lease expired`,
      );
      await expect(lease.fenced(async () => 'never')).rejects.toBeInstanceOf(LeaseLostError);
      await lease.release();
      const held = await db.admin.query(`SELECT count(*)::int AS n FROM job_lease WHERE lease_token IS NOT NULL`);
      expect(held.rows[0].n).toBe(0);
    } finally {
      await a.close();
    }
  });

  test('event loop blocked past the deadline: the lease counts as lost at once, and nothing can be saved with it', async () => {
    const a = await startService(db.url, OPTIONS);
    try {
      const lease = (await a.service.tryAcquire('frozen'))!;
      const until = performance.now() + OPTIONS.timing.leaseTimeoutMs; // a synchronous stall: no timers, no renewals
      while (performance.now() < until) {
        // busy
      }
      expect(lease.isHeld()).toBe(false);
      await expect(lease.fenced(async (manager) => manager.query('SELECT 1'))).rejects.toBeInstanceOf(LeaseLostError);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(lease.signal.aborted).toBe(true);
      await lease.release();
    } finally {
      await a.close();
    }
  });

  test('a fenced write whose work outlives the local deadline is rolled back', async () => {
    await db.admin.query('CREATE TABLE IF NOT EXISTS slow_result (id int)');
    const a = await startService(db.url, OPTIONS);
    try {
      const lease = (await a.service.tryAcquire('slow-fence'))!;
      await expect(
        lease.fenced(async (manager) => {
          await manager.query('INSERT INTO slow_result VALUES (1)');
          // The fenced transaction holds the row lock, so the heartbeat cannot renew meanwhile.
          await new Promise((resolve) => setTimeout(resolve, OPTIONS.timing.leaseTimeoutMs));
        }),
      ).rejects.toBeInstanceOf(LeaseLostError);
      expect((await db.admin.query('SELECT count(*)::int AS n FROM slow_result')).rows[0].n).toBe(0);
      await lease.release();
    } finally {
      await a.close();
    }
  });
});

describe('asyncReleaseCommits', () => {
  test('leases work as usual with asynchronously committed releases', async () => {
    const db = await createTestDatabase('async');
    const admin = await adminClient(db.url);
    const a = await startService(
      db.url,
      {
        timing: { heartbeatIntervalMs: 500, leaseTimeoutMs: 3_000, safetyMarginMs: 1_000 },
        connections: { asyncReleaseCommits: true },
      },
      'async-commits',
    );
    try {
      const lease = (await a.service.tryAcquire('async'))!;
      const renewed = await new Promise<number>((resolve) => {
        let count = 0;
        const sub = a.service.events$.subscribe((event) => {
          if (event.type === 'renewed' && ++count === 3) {
            sub.unsubscribe();
            resolve(count);
          }
        });
      });
      expect(renewed).toBe(3);
      expect(lease.isHeld()).toBe(true);
      await lease.release();
      const held = await admin.query('SELECT count(*)::int AS n FROM job_lease WHERE lease_token IS NOT NULL');
      expect(held.rows[0].n).toBe(0);
    } finally {
      await a.close();
      await admin.end();
      await db.drop();
    }
  });
});
