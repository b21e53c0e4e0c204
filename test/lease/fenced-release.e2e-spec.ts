import { LeaseArgumentError, type LeaseEvent, LeaseLostError, LeaseUnavailableError } from 'nest-pg-lease';
import pg from 'pg';
import { schemaStatements } from '../../libs/lease/src/internal.js';
import { eventually, ISOLATIONS, startService, useTestDatabase } from '../support/db.js';

/**
 * `fenced(work, { release: true })`: the release rides on the work's last save — one transaction, one commit for
 * save + release, the head of the line notified by that commit. Each write records its transaction id, and a trigger
 * records the transaction that cleared the lease token, so "the same commit" is read from the database itself.
 */
describe.each(ISOLATIONS)('a release that rides on the last save (default_transaction_isolation = %s)', (isolation) => {
  const db = useTestDatabase('fenced_release', isolation, async (admin) => {
    for (const statement of schemaStatements({
      schema: 'public',
      tableName: 'job_lease',
      waiterTableName: 'job_lease_waiter',
    })) {
      await admin.query(statement);
    }
    await admin.query(`CREATE TABLE job_result (target_id text, fencing_token bigint NOT NULL, xid bigint NOT NULL)`);
    await admin.query(`CREATE TABLE release_log (target_id text, xid bigint NOT NULL)`);
    await admin.query(`CREATE FUNCTION log_release() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF OLD.lease_token IS NOT NULL AND NEW.lease_token IS NULL THEN
          INSERT INTO release_log VALUES (NEW.target_id, txid_current());
        END IF;
        RETURN NEW;
      END $$`);
    await admin.query(
      `CREATE TRIGGER log_release AFTER UPDATE ON job_lease FOR EACH ROW EXECUTE FUNCTION log_release()`,
    );
    // Aimed at one key only: the releasing statement of 'release:stalled' sleeps inside PostgreSQL.
    await admin.query(`CREATE FUNCTION stall_release() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.target_id = 'release:stalled' AND OLD.lease_token IS NOT NULL AND NEW.lease_token IS NULL THEN
          PERFORM pg_sleep(30);
        END IF;
        RETURN NEW;
      END $$`);
    await admin.query(
      `CREATE TRIGGER stall_release BEFORE UPDATE ON job_lease FOR EACH ROW EXECUTE FUNCTION stall_release()`,
    );
  });

  const save =
    (key: string, token: bigint) =>
    async (manager: { query: (sql: string, values: unknown[]) => Promise<unknown> }) => {
      await manager.query(`INSERT INTO job_result VALUES ($1, $2, txid_current())`, [key, token.toString()]);
      return 'saved';
    };
  const rows = async (key: string) => ({
    saves: (await db.admin.query(`SELECT xid::text FROM job_result WHERE target_id = $1`, [key])).rows,
    releases: (await db.admin.query(`SELECT xid::text FROM release_log WHERE target_id = $1`, [key])).rows,
    row: (await db.admin.query(`SELECT lease_token FROM job_lease WHERE target_id = $1`, [key])).rows[0],
  });

  test('the save and the release commit in one transaction; the lease ends locally; no release statement follows', async () => {
    const a = await startService(db.url, {}, 'saver');
    const events: LeaseEvent[] = [];
    const subscription = a.service.events$.subscribe((event) => events.push(event));
    // Count the statements that clear a lease token, on every pg client of this process.
    const sent: string[] = [];
    const query = pg.Client.prototype.query;
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      const config = args[0] as string | { text?: string };
      const text = typeof config === 'string' ? config : config?.text;
      if (typeof text === 'string' && text.includes('SET lease_token = NULL')) sent.push(text);
      return (query as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof query;
    try {
      const result = await a.service.run('release:one', async (lease) => {
        const saved = await lease.fenced(save('release:one', lease.fencingToken), { release: true });
        expect(lease.isHeld()).toBe(false);
        expect(lease.signal.aborted).toBe(true);
        return saved;
      });
      expect(result).toBe('saved');
      const { saves, releases, row } = await rows('release:one');
      expect(saves).toHaveLength(1);
      expect(releases).toEqual(saves); // the same transaction id: one commit for both
      expect(row.lease_token).toBeNull();
      expect(sent).toHaveLength(1); // run()'s own release at the end sent nothing more
      expect(events.filter((event) => event.type === 'released').map((event) => event.targetKey)).toEqual([
        'release:one',
      ]);
      expect(a.service.heldLeases()).toEqual([]);
    } finally {
      pg.Client.prototype.query = query;
      subscription.unsubscribe();
      await a.close();
    }
  });

  test('a waiter in line is woken by that commit and holds the lease next, with a larger token', async () => {
    const a = await startService(db.url, {}, 'saver');
    const b = await startService(db.url, { timing: { waitPollIntervalMs: 60_000 } }, 'waiter');
    try {
      const lease = (await a.service.tryAcquire('release:line'))!;
      const waiting = b.service.acquire('release:line', { priority: 1, onBusy: { wait: { timeoutMs: 30_000 } } });
      await eventually(
        () => db.admin.query(`SELECT 1 FROM job_lease_waiter WHERE target_id = 'release:line'`),
        (result) => result.rows.length === 1,
        'the waiter to queue',
      );
      const started = performance.now();
      await lease.fenced(save('release:line', lease.fencingToken), { release: true });
      const next = await waiting;
      // Woken by NOTIFY at the commit: the poll is a minute away.
      expect(performance.now() - started).toBeLessThan(10_000);
      expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
      await next.release();
    } finally {
      await a.close();
      await b.close();
    }
  });

  test('work that throws: nothing saved, nothing released, the lease still held', async () => {
    const a = await startService(db.url, {}, 'saver');
    try {
      const lease = (await a.service.tryAcquire('release:throws'))!;
      await expect(
        lease.fenced(
          async (manager) => {
            await save('release:throws', lease.fencingToken)(manager);
            throw new Error('the work failed');
          },
          { release: true },
        ),
      ).rejects.toThrow('the work failed');
      const { saves, releases, row } = await rows('release:throws');
      expect([saves, releases]).toEqual([[], []]);
      expect(row.lease_token).not.toBeNull();
      expect(lease.isHeld()).toBe(true);
      await lease.fenced(save('release:throws', lease.fencingToken), { release: true });
      expect((await rows('release:throws')).row.lease_token).toBeNull();
    } finally {
      await a.close();
    }
  });

  test('a lease taken over meanwhile: LeaseLostError, nothing saved, the new holder untouched', async () => {
    const a = await startService(db.url, { timing: { heartbeatIntervalMs: 2_000, leaseTimeoutMs: 6_000 } }, 'old');
    const b = await startService(db.url, {}, 'new');
    try {
      const old = (await a.service.tryAcquire('release:taken'))!;
      await db.admin.query(
        `UPDATE job_lease SET updated_at = updated_at - interval '1 hour' WHERE target_id = 'release:taken'`,
      );
      const taker = (await b.service.tryAcquire('release:taken'))!;
      await expect(old.fenced(save('release:taken', old.fencingToken), { release: true })).rejects.toBeInstanceOf(
        LeaseLostError,
      );
      const { saves, row } = await rows('release:taken');
      expect(saves).toEqual([]);
      expect(row.lease_token).toBe(taker.token);
      await taker.release();
    } finally {
      await a.close();
      await b.close();
    }
  });

  test('release: true inside an open fenced transaction, or on a reentrant call: LeaseArgumentError, nothing written', async () => {
    const a = await startService(db.url, {}, 'saver');
    try {
      await a.service.run('release:nested', async (outer) => {
        await expect(
          outer.fenced(async (manager) => {
            await save('release:nested', outer.fencingToken)(manager);
            return outer.fenced(save('release:nested', outer.fencingToken), { release: true });
          }),
        ).rejects.toBeInstanceOf(LeaseArgumentError);
        await a.service.run('release:nested', async (inner) => {
          await expect(
            inner.fenced(save('release:nested', inner.fencingToken), { release: true }),
          ).rejects.toBeInstanceOf(LeaseArgumentError);
        });
        expect(outer.isHeld()).toBe(true);
      });
      expect((await rows('release:nested')).saves).toEqual([]);
      await expect(
        a.service.run('release:bad', (lease) => lease.fenced(async () => 1, { release: 'yes' as never })),
      ).rejects.toBeInstanceOf(LeaseArgumentError);
    } finally {
      await a.close();
    }
  });

  test('the releasing statement killed inside PostgreSQL: neither the save nor the release commits; the lease stays held and is released after', async () => {
    const a = await startService(db.url, {}, 'stalled-saver');
    try {
      const lease = (await a.service.tryAcquire('release:stalled'))!;
      const write = lease.fenced(save('release:stalled', lease.fencingToken), { release: true });
      const stalled = await eventually(
        () =>
          db.admin.query(
            `SELECT pid FROM pg_stat_activity WHERE application_name = 'stalled-saver' AND wait_event = 'PgSleep'`,
          ),
        (result) => result.rows.length === 1,
        'the releasing statement to stall in its trigger',
      );
      await db.admin.query('SELECT pg_terminate_backend($1)', [stalled.rows[0].pid]);
      await expect(write).rejects.toBeInstanceOf(LeaseUnavailableError);
      const { saves, releases, row } = await rows('release:stalled');
      expect([saves, releases]).toEqual([[], []]);
      expect(row.lease_token).toBe(lease.token);
      expect(lease.isHeld()).toBe(true);
      await db.admin.query('ALTER TABLE job_lease DISABLE TRIGGER stall_release');
      await lease.release();
      expect((await rows('release:stalled')).row.lease_token).toBeNull();
    } finally {
      await db.admin.query('ALTER TABLE job_lease ENABLE TRIGGER stall_release');
      await a.close();
    }
  });
});
