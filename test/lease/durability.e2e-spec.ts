/**
 * Durability does not depend on the application's session defaults (issue 21 item 7): with the role's default
 * `synchronous_commit = off` (a common tuning), acquisitions (single and batched), renewals, the commit of `fenced()`
 * and releases still wait for the WAL flush, and so does the confirmation of a handed-over grant (issue 38 item 1).
 * Observed from inside the server: a deferred trigger records the `synchronous_commit` in force at each commit that
 * wrote a lease row (or a fenced write). The crash tests of the same property are in
 * `test/faults/durability.fault-spec.ts`.
 */
import type { LeaseService } from 'nest-pg-lease';
import { interceptHeadWakeups } from '../../libs/lease/src/internal.js';
import { useTestDatabase } from '../support/db.js';
import { procsOf, untilAsleep } from '../priority/helpers.js';

function renewed(service: LeaseService): Promise<void> {
  return new Promise((resolve) => {
    const subscription = service.events$.subscribe((event) => {
      if (event.type !== 'renewed') return;
      subscription.unsubscribe();
      resolve();
    });
  });
}

describe('durability whatever the session default', () => {
  const db = useTestDatabase('durability', 'read committed', async (admin, url) => {
    const name = decodeURIComponent(new URL(url).pathname.slice(1));
    // The role default of the application's sessions in this database, as `ALTER ROLE … SET` would make it.
    await admin.query(`ALTER ROLE CURRENT_USER IN DATABASE "${name.replace(/"/g, '""')}" SET synchronous_commit = off`);
    await admin.query(`CREATE TABLE commits (at timestamptz DEFAULT clock_timestamp(), what text, setting text);
      CREATE TABLE fenced_writes (id serial PRIMARY KEY, note text);
      CREATE FUNCTION record_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO commits (what, setting) VALUES (TG_TABLE_NAME || ' ' || TG_OP, current_setting('synchronous_commit'));
        RETURN NULL;
      END $$;
      CREATE CONSTRAINT TRIGGER record_commit AFTER INSERT ON fenced_writes DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW EXECUTE FUNCTION record_commit();`);
  });

  test('acquisitions, batches, renewals, fenced() and releases commit with synchronous_commit on', async () => {
    const { service } = await db.open({ timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000 } });
    const check = await db.admin.query<{ setting: string }>(
      `SELECT setting FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase,
         unnest(s.setconfig) AS setting WHERE d.datname = current_database()`,
    );
    expect(check.rows.map((row) => row.setting)).toContain('synchronous_commit=off');
    await db.admin.query(`CREATE CONSTRAINT TRIGGER record_commit AFTER INSERT OR UPDATE ON job_lease
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION record_commit()`);

    const single = (await service.tryAcquire('durable:single'))!;
    // Three calls in one turn: one batch, one commit.
    const batch = await Promise.all(['durable:b1', 'durable:b2', 'durable:b3'].map((key) => service.tryAcquire(key)));
    await renewed(service);
    await single.fenced((manager) => manager.query(`INSERT INTO fenced_writes (note) VALUES ('fenced')`));
    await single.release();
    await Promise.all(batch.map((lease) => lease!.release()));

    const { rows } = await db.admin.query<{ what: string; setting: string }>(
      'SELECT what, setting FROM commits ORDER BY at',
    );
    const kinds = new Set(rows.map((row) => row.what));
    expect(kinds).toEqual(new Set(['job_lease INSERT', 'job_lease UPDATE', 'fenced_writes INSERT']));
    expect(rows.filter((row) => row.setting === 'off')).toEqual([]);
  });
  test("a handed-over grant's confirmation commits with synchronous_commit on, by its NOTIFY or by the poll", async () => {
    const proc = procsOf(db);
    const holder = await proc('holder');
    // Waiter heartbeats far apart: the confirmation comes from the NOTIFY (or the poll), not from an eviction.
    const notified = await proc('notified', { timing: { waitPollIntervalMs: 20_000, waiterTimeoutMs: 30_000 } }, 1);
    const polling = await proc('polling', { timing: { waitPollIntervalMs: 300, waiterTimeoutMs: 30_000 } }, 1);
    interceptHeadWakeups(polling.service, () => undefined);
    await db.admin.query(`DROP TRIGGER IF EXISTS record_commit ON job_lease;
      CREATE CONSTRAINT TRIGGER record_commit AFTER INSERT OR UPDATE ON job_lease
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION record_commit()`);

    const confirmed: bigint[] = [];
    for (const [key, waiter] of [
      ['durable:notified', notified],
      ['durable:polled', polling],
    ] as const) {
      const held = (await holder.service.tryAcquire(key))!;
      const call = waiter.service.acquire(key, { onBusy: { wait: { timeoutMs: 30_000 } } });
      await untilAsleep(db.admin, key, waiter);
      await db.admin.query('TRUNCATE commits');
      await held.release();
      const lease = await call;
      confirmed.push(lease.fencingToken);
      const { rows } = await db.admin.query<{ what: string; setting: string }>(
        'SELECT what, setting FROM commits ORDER BY at',
      );
      // The release's grant, then the waiter's confirmation (and any renewal meanwhile): all wait for the WAL flush.
      expect(rows.length).toBeGreaterThanOrEqual(2);
      expect({ key, async: rows.filter((row) => row.setting !== 'on') }).toEqual({ key, async: [] });
      await lease.release();
    }
    expect(confirmed).toHaveLength(2);
  });
});
