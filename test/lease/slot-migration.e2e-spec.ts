import { LeaseLimitConflictError, LeaseService, leaseEntities, leaseMigrations } from 'nest-pg-lease';
import pg from 'pg';
import { DataSource } from 'typeorm';
import { LeaseStore, resolveLeaseOptions } from '../../libs/lease/src/internal.js';
import { adminClient, createTestDatabase } from '../support/db.js';

/**
 * The `slot` column (issue 39): a semaphore's slot is `(target_id, slot)` of the lease table, no longer a row named
 * `<key>\u001f<slot>`. Its migration converts the tables from before it (slot rows named so) — slot rows, the rows recording a key's limit,
 * the high-water row of the purge (named by a lone U+001F) — and the library works on the result: a slot held across
 * the migration keeps its token, and its holder renews, fences and releases it.
 */
const OPTIONS = { timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000, shutdownGraceMs: 0 } };
const MIGRATION = 'AddLeaseSlotColumn1796428800000';
const KEY = 'report tenant/7';
const SLOT_0_TOKEN = '0b7a2d4e-0000-4000-8000-000000000000';
const SINGLE_TOKEN = '0b7a2d4e-0000-4000-8000-00000000000a';
const timeline1 = (n: bigint) => (1n << 47n) | n;
const SLOT_0_FENCE = timeline1((1n << 40n) + 100n);
const SLOT_2_FENCE = timeline1((1n << 40n) + 102n);
const SINGLE_FENCE = timeline1((1n << 40n) + 103n);
const HIGH_WATER = timeline1((1n << 40n) + 5_000_000n);

/** A database whose lease tables were made by the migrations before the slot column (`count` of them). */
async function oldTables(prefix: string, count: number) {
  const db = await createTestDatabase(prefix);
  const admin = await adminClient(db.url);
  const dataSource = (migrations: number) =>
    new DataSource({
      type: 'postgres',
      url: db.url,
      entities: [...leaseEntities],
      migrations: leaseMigrations.slice(0, migrations),
    });
  const old = dataSource(count);
  await old.initialize();
  await old.runMigrations();
  await old.destroy();
  return { db, admin, dataSource };
}

/** The rows of the lease table, as the migration left them. */
async function leaseRows(admin: pg.Client) {
  const { rows } = await admin.query(
    `SELECT target_id, slot, lease_token, fencing_token::text AS fencing_token, slot_limit FROM job_lease
     ORDER BY target_id, slot`,
  );
  return rows;
}

describe('the slot column migration (AddLeaseSlotColumn)', () => {
  test('slot-row tables: slot rows become (key, slot), the limit rows go, the high-water row moves; the library works', async () => {
    const { db, admin, dataSource } = await oldTables('slot_from_03', 6);
    // The slot-row tables' rows: slots 0 (held) and 2 (released) of a limit-3 key, the row recording that limit, a held single
    // lease, and the high-water row of the purge.
    await admin.query(
      `INSERT INTO job_lease (target_id, lease_token, fencing_token, owner, lease_timeout_ms, acquired_at, updated_at,
         slot_limit)
       VALUES ($1 || chr(31) || '0', $2, $3, 'v0.3', 60000, now(), now(), 3),
              ($1 || chr(31) || '2', NULL, $4, 'v0.3', 60000, now() - interval '1 minute', now(), 3),
              ($1 || chr(31), NULL, 0, 'v0.3', 60000, now(), now(), 3),
              ('single', $5, $6, 'v0.3', 60000, now(), now(), NULL),
              (chr(31), NULL, $7, 'nest-pg-lease: purged up to this token', 1, now(), now(), NULL)`,
      [KEY, SLOT_0_TOKEN, SLOT_0_FENCE, SLOT_2_FENCE, SINGLE_TOKEN, SINGLE_FENCE, HIGH_WATER],
    );
    const migrated = dataSource(leaseMigrations.length);
    await migrated.initialize();
    const pool = new pg.Pool({ connectionString: db.url, max: 4 });
    const service = new LeaseService(migrated, OPTIONS);
    try {
      expect((await migrated.runMigrations()).map((migration) => migration.name)).toEqual([MIGRATION]);
      expect(await leaseRows(admin)).toEqual([
        { target_id: '\u001f', slot: -1, lease_token: null, fencing_token: String(HIGH_WATER), slot_limit: null },
        { target_id: KEY, slot: 1, lease_token: SLOT_0_TOKEN, fencing_token: String(SLOT_0_FENCE), slot_limit: 3 },
        { target_id: KEY, slot: 3, lease_token: null, fencing_token: String(SLOT_2_FENCE), slot_limit: 3 },
        {
          target_id: 'single',
          slot: 0,
          lease_token: SINGLE_TOKEN,
          fencing_token: String(SINGLE_FENCE),
          slot_limit: null,
        },
      ]);
      const key = await admin.query(
        `SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = 'job_lease'::regclass AND contype = 'p'`,
      );
      expect(key.rows).toEqual([{ def: 'PRIMARY KEY (target_id, slot)' }]);

      await service.init(); // bootstrap finds the new shape
      // The holders of the slot-row tables' leases, through the library's own statements, with their tokens.
      const holder = new LeaseStore(pool, pool, resolveLeaseOptions({ ...OPTIONS, owner: 'v0.3' }));
      const slot = { targetKey: KEY, slot: 1 };
      const single = { targetKey: 'single', slot: 0 };
      const renewed = await holder.renew([slot, single], [SLOT_0_TOKEN, SINGLE_TOKEN], 1_000);
      expect([...renewed.kept].sort()).toEqual([SLOT_0_TOKEN, SINGLE_TOKEN]);
      const fenced = await migrated.transaction((manager) => holder.fence.lockForFence(manager, slot, 1_000));
      expect(fenced.leaseToken).toBe(SLOT_0_TOKEN);

      // The converted slots count: slot 0 is held under limit 3, so another limit conflicts, and limit 3 has two more.
      await expect(service.tryAcquire(KEY, { limit: 2 })).rejects.toMatchObject({
        name: LeaseLimitConflictError.name,
        heldLimit: 3,
      });
      // A free slot row is taken before a slot that never had one: slot 2 (the released slot row), then slot 1.
      const next = [(await service.tryAcquire(KEY, { limit: 3 }))!, (await service.tryAcquire(KEY, { limit: 3 }))!];
      expect(next.map((lease) => lease.slot)).toEqual([2, 1]);
      expect(next[0].fencingToken).toBeGreaterThan(SLOT_2_FENCE);
      expect(await service.tryAcquire(KEY, { limit: 3 })).toBeNull();
      expect((await service.list(KEY)).map((row) => [row.slot, row.owner, row.fencingToken])).toEqual([
        [0, 'v0.3', SLOT_0_FENCE],
        [1, service.options.owner, next[1].fencingToken],
        [2, service.options.owner, next[0].fencingToken],
      ]);

      // The holders release; their slot and key are the next callers', above their tokens.
      expect(await holder.release(slot, SLOT_0_TOKEN, 1_000)).toBe(true);
      const taken = (await service.tryAcquire(KEY, { limit: 3 }))!;
      expect([taken.slot, taken.fencingToken > SLOT_0_FENCE]).toEqual([0, true]);
      expect(await service.tryAcquire('single')).toBeNull();
      expect(await holder.release(single, SINGLE_TOKEN, 1_000)).toBe(true);
      expect((await service.tryAcquire('single'))!.fencingToken).toBeGreaterThan(SINGLE_FENCE);

      // The high-water mark floors a new key's first row from its new place (the sequence set back below it).
      await admin.query(`SELECT setval('job_lease_fencing_seq', $1)`, [(1n << 40n) + 200n]);
      expect((await service.tryAcquire('new:after-migration'))!.fencingToken).toBe(HIGH_WATER + 1n);
    } finally {
      await service.close();
      await pool.end();
      await migrated.destroy();
      await admin.end();
      await db.drop();
    }
  });

  test('40-bit layout tables (no slot_limit, no preempt_of): every later migration, then the slot column; a lease held across', async () => {
    const { db, admin, dataSource } = await oldTables('slot_from_02', 1);
    // The first migration of the 40-bit layout had neither column; its lease is of the 40-bit token layout.
    await admin.query('ALTER TABLE job_lease DROP COLUMN slot_limit, DROP COLUMN preempt_of');
    const token40 = (3n << 40n) | 4_999n;
    await admin.query(
      `INSERT INTO job_lease (target_id, lease_token, fencing_token, owner, lease_timeout_ms, acquired_at, updated_at)
       VALUES ('v02:held', $1, $2, 'v0.2', 60000, now(), now())`,
      [SINGLE_TOKEN, token40],
    );
    const migrated = dataSource(leaseMigrations.length);
    await migrated.initialize();
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    const service = new LeaseService(migrated, OPTIONS);
    try {
      expect((await migrated.runMigrations()).map((migration) => migration.name).at(-1)).toBe(MIGRATION);
      expect(await leaseRows(admin)).toEqual([
        { target_id: 'v02:held', slot: 0, lease_token: SINGLE_TOKEN, fencing_token: String(token40), slot_limit: null },
      ]);
      await service.init();
      const holder = new LeaseStore(pool, pool, resolveLeaseOptions(OPTIONS));
      expect((await holder.renew([{ targetKey: 'v02:held', slot: 0 }], [SINGLE_TOKEN], 1_000)).kept.size).toBe(1);
      expect(await service.tryAcquire('v02:held')).toBeNull();
      const slots = [await service.tryAcquire('v02:held', { limit: 2 }).catch((e: unknown) => e)];
      expect(slots[0]).toMatchObject({ name: LeaseLimitConflictError.name, heldLimit: 1 });
    } finally {
      await service.close();
      await pool.end();
      await migrated.destroy();
      await admin.end();
      await db.drop();
    }
  });

  test('down() gives the slot-row names back (slot rows, limit rows, high-water row); keys they cannot spell refuse it', async () => {
    const { db, admin, dataSource } = await oldTables('slot_down', 6);
    const migrated = dataSource(leaseMigrations.length);
    await migrated.initialize();
    try {
      await migrated.runMigrations();
      await admin.query(
        `INSERT INTO job_lease (target_id, slot, lease_token, fencing_token, owner, lease_timeout_ms, acquired_at,
           updated_at, slot_limit)
         VALUES ($1, 1, $2, $3, 'x', 60000, now(), now(), 2), ($1, 2, NULL, $4, 'x', 60000, now(), now(), 2),
                ('plain', 0, NULL, $5, 'x', 60000, now(), now(), NULL),
                (chr(31), -1, NULL, $6, 'purged', 1, now(), now(), NULL)`,
        [KEY, SLOT_0_TOKEN, SLOT_0_FENCE, SLOT_2_FENCE, SINGLE_FENCE, HIGH_WATER],
      );
      // A key with U+001F (allowed since the column) has no name in the slot-row tables: down() refuses, changing nothing.
      await admin.query(
        `INSERT INTO job_lease (target_id, lease_token, fencing_token, owner, lease_timeout_ms, acquired_at, updated_at)
         VALUES ('a' || chr(31) || '1', NULL, 1, 'x', 60000, now(), now())`,
      );
      await expect(migrated.undoLastMigration()).rejects.toThrow(/U\+001F/);
      expect((await leaseRows(admin)).length).toBe(5);
      await admin.query(`DELETE FROM job_lease WHERE target_id = 'a' || chr(31) || '1'`);

      await migrated.undoLastMigration();
      const { rows } = await admin.query(
        `SELECT target_id, lease_token, fencing_token::text AS fencing_token, slot_limit FROM job_lease ORDER BY target_id`,
      );
      expect(rows).toEqual([
        { target_id: '\u001f', lease_token: null, fencing_token: String(HIGH_WATER), slot_limit: null },
        { target_id: 'plain', lease_token: null, fencing_token: String(SINGLE_FENCE), slot_limit: null },
        { target_id: `${KEY}\u001f`, lease_token: null, fencing_token: '0', slot_limit: 2 },
        { target_id: `${KEY}\u001f0`, lease_token: SLOT_0_TOKEN, fencing_token: String(SLOT_0_FENCE), slot_limit: 2 },
        { target_id: `${KEY}\u001f1`, lease_token: null, fencing_token: String(SLOT_2_FENCE), slot_limit: 2 },
      ]);
      const column = await admin.query(
        `SELECT 1 FROM information_schema.columns WHERE table_name = 'job_lease' AND column_name = 'slot'`,
      );
      expect(column.rowCount).toBe(0);
      // And up again.
      expect((await migrated.runMigrations()).map((migration) => migration.name)).toEqual([MIGRATION]);
      expect((await leaseRows(admin)).map((row) => [row.target_id, row.slot])).toEqual([
        ['\u001f', -1],
        ['plain', 0],
        [KEY, 1],
        [KEY, 2],
      ]);
    } finally {
      await migrated.destroy();
      await admin.end();
      await db.drop();
    }
  });
});
