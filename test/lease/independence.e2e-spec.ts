import { LeaseLostError, type LeaseEvent } from 'nest-pg-lease';
import pg from 'pg';
import { ownRow, resolveLeaseOptions, LeaseStore } from '../../libs/lease/src/internal.js';
import { eventually, FAST, startService, useTestDatabase } from '../support/db.js';

/**
 * Guarantees 4/6 and invariant 9: one lease's fate never depends on another's — not on a long fenced transaction of
 * the same process, not on a slow waiter renewal; a renewal never revives an expired row; a nested fenced() never
 * waits for itself.
 */
describe('independence', () => {
  const db = useTestDatabase('independence', 'read committed', (admin) =>
    admin.query('CREATE TABLE fenced_rows (label text NOT NULL)'),
  );

  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  const updatedAt = async (key: string) =>
    (await db.admin.query(`SELECT updated_at::text AS at FROM job_lease WHERE target_id = $1`, [key])).rows[0]
      ?.at as string;
  const heartbeatBackends = async (app: string) =>
    (
      await db.admin.query(`SELECT pid, state, wait_event_type FROM pg_stat_activity WHERE application_name = $1`, [
        `${app}:heartbeat`,
      ])
    ).rows;

  test('a fence of 3 × leaseTimeoutMs costs no other lease; no backend left behind; no ghost renewal', async () => {
    const a = await startService(db.url, {}, 'indep-a'); // heartbeat 100 ms, lease 1 s
    try {
      const events: LeaseEvent[] = [];
      a.service.events$.subscribe((event) => events.push(event));
      const x = (await a.service.tryAcquire('indep:x'))!;
      const y = (await a.service.tryAcquire('indep:y'))!;
      let maxBackends = 0;
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          maxBackends = Math.max(maxBackends, (await heartbeatBackends('indep-a')).length);
          await sleep(50);
        }
      })();
      // The statement keeps the transaction active (not idle), so only the row lock is at work for 3 s.
      const fence = x.fenced(async (manager) => manager.query('SELECT pg_sleep(3)'));
      await expect(fence).rejects.toBeInstanceOf(LeaseLostError);
      sampling = false;
      await sampler;
      const xAfter = await updatedAt('indep:x');
      // y was renewed all along; x, whose row our own transaction held, was never taken for "taken over".
      expect(y.isHeld()).toBe(true);
      expect(y.signal.aborted).toBe(false);
      const losses = events.filter((event) => event.type === 'lost');
      expect(losses).toEqual([expect.objectContaining({ targetKey: 'indep:x', reason: 'renewal-deadline' })]);
      expect(maxBackends).toBeLessThanOrEqual(1);
      // Nothing renews x after the process gave it up.
      await sleep(500);
      expect(await updatedAt('indep:x')).toBe(xAfter);
      expect((await heartbeatBackends('indep-a')).filter((backend) => backend.wait_event_type === 'Lock')).toEqual([]);
      await y.release();
    } finally {
      await a.close();
    }
  });

  test('a slow waiter renewal never costs a held lease', async () => {
    const holder = await startService(db.url, { owner: 'other' });
    // Renewals bounded by 400 ms + slack: a renewal held up by the waiter's 1 s would fail, a loaded machine's
    // 200 ms blip would not (the default 100 ms heartbeat failed one at 219 ms at load 6, no waiter involved).
    const a = await startService(
      db.url,
      { owner: 'slow-waiter', timing: { heartbeatIntervalMs: 400, leaseTimeoutMs: 4_000 } },
      'slow-waiter',
    );
    // Test instrumentation: every waiter renewal of this owner takes a second (its heartbeat runs every 200 ms).
    await db.admin.query(`
      CREATE FUNCTION slow_waiter() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.owner = 'slow-waiter' THEN PERFORM pg_sleep(1); END IF; RETURN NEW; END $$;
      CREATE TRIGGER slow_waiter BEFORE UPDATE ON job_lease_waiter FOR EACH ROW EXECUTE FUNCTION slow_waiter();`);
    try {
      const failures: LeaseEvent[] = [];
      a.service.events$.subscribe(
        (event) => (event.type === 'renew-failed' || event.type === 'lost') && failures.push(event),
      );
      const lease = (await a.service.tryAcquire('indep:held'))!;
      const busy = (await holder.service.tryAcquire('indep:busy'))!;
      const waiting = a.service
        .acquire('indep:busy', { onBusy: { wait: { timeoutMs: 4_000 } } })
        .catch((error: unknown) => error);
      await waiting;
      expect(failures).toEqual([]);
      expect(lease.isHeld()).toBe(true);
      await lease.release();
      await busy.release();
    } finally {
      await db.admin.query('DROP TRIGGER slow_waiter ON job_lease_waiter; DROP FUNCTION slow_waiter()');
      await a.close();
      await holder.close();
    }
  });

  test('a renewal never revives an expired row (the library statement with the old token)', async () => {
    const a = await startService(db.url, { timing: { heartbeatIntervalMs: 2_000, leaseTimeoutMs: 6_000 } });
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const lease = (await a.service.tryAcquire('indep:expired'))!;
      await db.admin.query(
        `UPDATE job_lease SET updated_at = updated_at - interval '1 hour' WHERE target_id = 'indep:expired'`,
      );
      const before = await updatedAt('indep:expired');
      const store = new LeaseStore(pool, pool, resolveLeaseOptions(FAST));
      await store.renew([ownRow('indep:expired')], [lease.token], 5_000);
      expect(await updatedAt('indep:expired')).toBe(before);
      // The holder's own heartbeat finds it expired too: lost, and the row is free at once.
      await eventually(
        () => lease.signal.aborted,
        (aborted) => aborted,
        'the holder to notice',
        5_000,
      );
      expect(await updatedAt('indep:expired')).toBe(before);
      const b = await startService(db.url);
      const next = await b.service.tryAcquire('indep:expired');
      expect(next).not.toBeNull();
      await next!.release();
      await b.close();
    } finally {
      await pool.end();
      await a.close();
    }
  });

  test('a nested fenced() on the same lease joins the outer transaction (savepoint) instead of waiting', async () => {
    const a = await startService(db.url);
    try {
      const started = performance.now();
      await a.service.run('indep:nested', async (lease) => {
        await lease.fenced(async (manager) => {
          await manager.query(`INSERT INTO fenced_rows VALUES ('outer')`);
          await lease.fenced(async (inner) => inner.query(`INSERT INTO fenced_rows VALUES ('inner')`));
          // A failing inner part rolls back to its savepoint; the outer goes on.
          await expect(
            lease.fenced(async (inner) => {
              await inner.query(`INSERT INTO fenced_rows VALUES ('rolled back')`);
              throw new Error('inner failed');
            }),
          ).rejects.toThrow('inner failed');
          // Reentrant: run() on the same key in the same call chain borrows the lease, and its fence joins too.
          await a.service.run('indep:nested', (borrowed) =>
            borrowed.fenced(async (inner) => {
              await inner.query(`INSERT INTO fenced_rows VALUES ('borrowed')`);
              // Two parts at once take turns on the one connection.
              await Promise.all(
                ['one', 'two'].map((label) =>
                  lease.fenced((part) => part.query(`INSERT INTO fenced_rows VALUES ($1)`, [label])),
                ),
              );
            }),
          );
        });
        expect(lease.isHeld()).toBe(true);
      });
      expect(performance.now() - started).toBeLessThan(500);
      const rows = (await db.admin.query('SELECT label FROM fenced_rows ORDER BY label')).rows.map((row) => row.label);
      expect(rows).toEqual(['borrowed', 'inner', 'one', 'outer', 'two']);
    } finally {
      await a.close();
    }
  });
});
