import { LeaseConfigError, LeaseService, leaseEntities, leaseMigrations } from 'nest-pg-lease';
import type pg from 'pg';
import { DataSource } from 'typeorm';
import { schemaStatements, mergeLeaseOptions } from '../../libs/lease/src/internal.js';
import { adminClient, createTestDatabase } from '../support/db.js';

/**
 * The token layout: `(timeline << 47) | n`, n drawn from a sequence that starts at 2^40 (16 timeline bits,
 * 2^47 − 2^40 values), and the migration from the layout before it, `(timeline << 40) | n` with n < 2^40: every new
 * token and every new place in line is above every old one, and a process of an earlier version, which builds its
 * token from a value below 2^40, fails closed on the migrated sequences instead of drawing a smaller token.
 */
/**
 * Roomy leases: nothing here waits for an expiry (rows are aged by SQL), and 1 s leases bound a connect to a few
 * hundred ms, which a loaded machine missed at bootstrap ("Connection terminated due to connection timeout").
 */
const OPTIONS = { timing: { heartbeatIntervalMs: 1_000, leaseTimeoutMs: 10_000, shutdownGraceMs: 0 } };
const FLOOR = 1n << 40n;

/** Tables as the 40-bit layout left them: sequences without the floor, tokens and places of the 40-bit layout. */
async function makeOldLayout(admin: pg.Client): Promise<void> {
  for (const statement of leaseMigrationsStatements()) await admin.query(statement);
  await admin.query(`ALTER SEQUENCE job_lease_fencing_seq MINVALUE 1 RESTART WITH 5000`);
  await admin.query(`ALTER SEQUENCE job_lease_waiter_seq MINVALUE 1 RESTART WITH 7000`);
  await admin.query(`SELECT nextval('job_lease_fencing_seq'), nextval('job_lease_waiter_seq')`);
  // A released row, a held row and a waiter of the 40-bit layout, on timeline 3 (3 promotions so far).
  await admin.query(`INSERT INTO job_lease
      (target_id, lease_token, fencing_token, owner, lease_timeout_ms, acquired_at, updated_at)
      VALUES ('old:released', NULL, (3::bigint << 40) | 4990, 'v0.2', 1000, now(), now()),
             ('old:held', gen_random_uuid(), (3::bigint << 40) | 4999, 'v0.2', 60000, now(), now())`);
  await admin.query(`INSERT INTO job_lease_waiter
      (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
      VALUES ('old:held', gen_random_uuid(), 'v0.2', 0, 60000, now(), (3::bigint << 40) | 6999, now())`);
}

/** The CREATE statements of the first migration, run by hand (the old tables come from them). */
function leaseMigrationsStatements(): string[] {
  return [`CREATE SEQUENCE job_lease_fencing_seq AS bigint`, `CREATE SEQUENCE job_lease_waiter_seq AS bigint`];
}

/** The token expression of the 40-bit layout, verbatim: NULL (refused by NOT NULL) for a value past 2^40 − 1. */
const OLD_TOKEN = `SELECT CASE WHEN s.v BETWEEN 0 AND 1099511627775 AND h.timeline < 8388608
      THEN (h.timeline << 40) | s.v END AS token
    FROM (SELECT nextval('job_lease_fencing_seq') AS v) s, (SELECT 1::bigint AS timeline) h`;

describe('the 47-bit token layout', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let admin: pg.Client;

  beforeEach(async () => {
    db = await createTestDatabase('layout');
    admin = await adminClient(db.url);
  });

  afterEach(async () => {
    await admin.end();
    await db.drop();
  });

  async function migrated(): Promise<DataSource> {
    const dataSource = new DataSource({
      type: 'postgres',
      url: db.url,
      entities: [...leaseEntities],
      migrations: [...leaseMigrations],
    });
    await dataSource.initialize();
    return dataSource;
  }

  test('a new schema: tokens are (timeline << 47) | n with n from 2^40, places in line the same', async () => {
    const dataSource = await migrated();
    const service = new LeaseService(dataSource, OPTIONS);
    try {
      await dataSource.runMigrations();
      await service.init();
      const lease = (await service.tryAcquire('layout:new'))!;
      const drawn = BigInt((await admin.query('SELECT last_value::text AS v FROM job_lease_fencing_seq')).rows[0].v);
      expect(lease.fencingToken >> 47n).toBe(1n);
      expect(lease.fencingToken & ((1n << 47n) - 1n)).toBe(drawn);
      expect(drawn).toBeGreaterThanOrEqual(FLOOR);
      const waiting = service.acquire('layout:new', { priority: 1, onBusy: { wait: { timeoutMs: 10_000 } } });
      let seq: string | undefined;
      for (let i = 0; seq === undefined; i++) {
        if (i > 250) throw new Error('the waiter never queued');
        seq = (await admin.query<{ seq: string }>(`SELECT seq::text FROM job_lease_waiter`)).rows[0]?.seq;
        if (seq === undefined) await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(BigInt(seq) >> 47n).toBe(1n);
      expect(BigInt(seq) & ((1n << 47n) - 1n)).toBeGreaterThanOrEqual(FLOOR);
      await lease.release();
      await (await waiting).release();
    } finally {
      await service.close();
      await dataSource.destroy();
    }
  });

  test('tables of the 40-bit layout: bootstrap names the migration; after it every new token and place is above every old one, and a draw of the 40-bit layout fails closed', async () => {
    await makeOldTables(admin);
    await makeOldLayout(admin);
    await recordFirstMigration(admin);
    const dataSource = await migrated();
    try {
      const refused = await new LeaseService(dataSource, OPTIONS).init().catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(LeaseConfigError);
      expect((refused as Error).message).toMatch(/40-bit fencing token layout/);
      expect((refused as Error).message).toMatch(/LeaseTokenLayout/);

      // The 40-bit layout had one migration: the later ones run, the token layout, then the slot_limit, preemption and slot columns.
      expect((await dataSource.runMigrations()).map((m) => m.name)).toEqual([
        'AddLeaseJoinResults1764633600000',
        'CreateLeaseConsoleTables1764720000000',
        'LeaseTokenLayout1796169600000',
        'AddLeaseSlotLimit1796256000000',
        'AddLeasePreemption1796342400000',
        'AddLeaseSlotColumn1796428800000',
      ]);
      // A process of the 40-bit layout still running draws a value past its 40 bits: NULL, which the NOT NULL column refuses.
      expect((await admin.query(OLD_TOKEN)).rows[0].token).toBeNull();

      const service = new LeaseService(dataSource, OPTIONS);
      await service.init();
      try {
        const taken = (await service.tryAcquire('old:released'))!;
        expect(taken.fencingToken).toBeGreaterThan((3n << 40n) | 4999n);
        const fresh = (await service.tryAcquire('layout:fresh'))!;
        expect(fresh.fencingToken).toBeGreaterThan(taken.fencingToken);
        // The column the fifth migration added to the 40-bit layout's table: a semaphore's slot works there.
        const slot = (await service.tryAcquire('layout:semaphore', { limit: 2 }))!;
        expect(slot.fencingToken).toBeGreaterThan(fresh.fencingToken);
        // A new waiter of old:held queues behind the 40-bit layout's waiter already there.
        const waiting = service.acquire('old:held', { priority: 0, onBusy: { wait: { timeoutMs: 30_000 } } });
        let rows: Array<{ owner: string; seq: string }> = [];
        for (let i = 0; rows.length < 2; i++) {
          if (i > 250) throw new Error('the waiter never queued');
          rows = (
            await admin.query(
              `SELECT owner, seq::text FROM job_lease_waiter WHERE target_id = 'old:held' ORDER BY job_lease_waiter.seq`,
            )
          ).rows;
          if (rows.length < 2) await new Promise((resolve) => setTimeout(resolve, 20));
        }
        expect(rows[0].owner).toBe('v0.2');
        expect(BigInt(rows[1].seq)).toBeGreaterThan(BigInt(rows[0].seq));
        // The 40-bit layout's holder and waiter go away (expired, dead): the new waiter gets the lease, with a larger token.
        await admin.query(`UPDATE job_lease SET updated_at = now() - interval '1 hour' WHERE target_id = 'old:held'`);
        await admin.query(`UPDATE job_lease_waiter SET heartbeat_at = now() - interval '1 hour' WHERE owner = 'v0.2'`);
        const granted = await waiting;
        expect(granted.fencingToken).toBeGreaterThan((3n << 40n) | 4999n);
        await Promise.all([taken.release(), fresh.release(), granted.release()]);
      } finally {
        await service.close();
      }
      // The migration is one-way: reverting it changes nothing (a process of the 40-bit layout keeps failing closed).
      await dataSource.undoLastMigration();
      expect((await admin.query(OLD_TOKEN)).rows[0].token).toBeNull();
    } finally {
      await dataSource.destroy();
    }
  });

  test('the migration refuses tokens the new layout could not order (timeline 128 or more), changing nothing', async () => {
    await makeOldTables(admin);
    await makeOldLayout(admin);
    await admin.query(`UPDATE job_lease SET fencing_token = (200::bigint << 40) | 1 WHERE target_id = 'old:held'`);
    await recordFirstMigration(admin);
    const dataSource = await migrated();
    try {
      await expect(dataSource.runMigrations()).rejects.toThrow(/timeline 128 or more/);
      const sequence = await admin.query(
        `SELECT seqmin::text FROM pg_sequence WHERE seqrelid = 'job_lease_fencing_seq'::regclass`,
      );
      expect(sequence.rows[0].seqmin).toBe('1');
    } finally {
      await dataSource.destroy();
    }
  });

  test('createSchema: true on tables of the 40-bit layout migrates them at bootstrap', async () => {
    await makeOldTables(admin);
    await makeOldLayout(admin);
    const dataSource = await migrated();
    const service = new LeaseService(dataSource, mergeLeaseOptions(OPTIONS, { tables: { createSchema: true } }));
    try {
      await service.init();
      const taken = (await service.tryAcquire('old:released'))!;
      expect(taken.fencingToken >> 47n).toBeGreaterThanOrEqual(1n);
      expect(taken.fencingToken).toBeGreaterThan((3n << 40n) | 4999n);
      await taken.release();
    } finally {
      await service.close();
      await dataSource.destroy();
    }
  });
});

/** The two tables of the 40-bit layout (the same columns as today's) without their sequences. */
async function makeOldTables(admin: pg.Client): Promise<void> {
  for (const statement of schemaStatements({
    schema: 'public',
    tableName: 'job_lease',
    waiterTableName: 'job_lease_waiter',
  })) {
    if (statement.startsWith('CREATE TABLE') || statement.startsWith('CREATE INDEX')) await admin.query(statement);
  }
}

/** TypeORM's record that the first migration (the 40-bit layout's CreateLeaseTables) ran. */
async function recordFirstMigration(admin: pg.Client): Promise<void> {
  await admin.query(
    `CREATE TABLE migrations (id serial PRIMARY KEY, "timestamp" bigint NOT NULL, name varchar NOT NULL)`,
  );
  await admin.query(
    `INSERT INTO migrations ("timestamp", name) VALUES (1764374400000, 'CreateLeaseTables1764374400000')`,
  );
}
