import {
  createLeaseEntities,
  createLeaseMigrations,
  LeaseConfigError,
  LeaseService,
  leaseEntities,
  leaseMigrations,
} from 'nest-pg-lease';
import { DataSource } from 'typeorm';
import { columnCheckName, slotColumnStatements, mergeLeaseOptions } from '../../libs/lease/src/internal.js';
import { adminClient, createTestDatabase } from '../support/db.js';

/** A database of its own, its admin client, and a DataSource with the lease entities and migrations, initialized. */
async function migratable(prefix: string) {
  const db = await createTestDatabase(prefix);
  const admin = await adminClient(db.url);
  const dataSource = new DataSource({
    type: 'postgres',
    url: db.url,
    entities: [...leaseEntities],
    migrations: [...leaseMigrations],
  });
  await dataSource.initialize();
  return { db, admin, dataSource };
}

describe('schema migrations', () => {
  test('leaseMigrations create the tables, the sequences and only the primary key on the lease table; revert drops them', async () => {
    const { db, admin, dataSource } = await migratable('migrations');
    try {
      // The lease tables, the join results (issue 24), the operator's tables (issue 26), the token layout (issue 25),
      // the semaphores' slot_limit column (issue 30), the preemption column (issue 24 part 2), the slot column
      // (issue 39: test/lease/slot-migration.e2e-spec.ts converts the rows of 0.2 and 0.3).
      expect((await dataSource.runMigrations()).map((migration) => migration.name)).toEqual([
        'CreateLeaseTables1764374400000',
        'AddLeaseJoinResults1764633600000',
        'CreateLeaseConsoleTables1764720000000',
        'LeaseTokenLayout1796169600000',
        'AddLeaseSlotLimit1796256000000',
        'AddLeasePreemption1796342400000',
        'AddLeaseSlotColumn1796428800000',
      ]);
      const operatorTables = await admin.query(
        `SELECT relname FROM pg_class WHERE relname IN ('job_lease_audit', 'job_lease_drain', 'job_lease_journal')
         ORDER BY relname`,
      );
      expect(operatorTables.rows.map((row) => row.relname)).toEqual([
        'job_lease_audit',
        'job_lease_drain',
        'job_lease_journal',
      ]);
      const tables = await admin.query(
        `SELECT relname, reloptions FROM pg_class WHERE relname IN ('job_lease', 'job_lease_waiter') ORDER BY relname`,
      );
      expect(tables.rows).toEqual([
        { relname: 'job_lease', reloptions: ['fillfactor=50'] },
        { relname: 'job_lease_waiter', reloptions: ['fillfactor=80'] },
      ]);
      const indexes = await admin.query(`SELECT indexname FROM pg_indexes WHERE tablename = 'job_lease'`);
      expect(indexes.rows).toEqual([{ indexname: 'job_lease_pkey' }]);
      const waiterIndexes = await admin.query(
        `SELECT indexname FROM pg_indexes WHERE tablename = 'job_lease_waiter' ORDER BY 1`,
      );
      expect(waiterIndexes.rows.map((row) => row.indexname)).toEqual([
        'job_lease_waiter_order_idx',
        'job_lease_waiter_pkey',
      ]);

      const service = new LeaseService(dataSource, {
        timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000, shutdownGraceMs: 0 },
      });
      await service.init(); // finds everything it needs
      const lease = await service.tryAcquire('migrated');
      expect(lease).not.toBeNull();
      const slot = await service.tryAcquire('migrated:semaphore', { limit: 2 });
      expect(slot?.slot).toBe(0);
      await service.close();

      await dataSource.undoLastMigration(); // the slot column
      const key = await admin.query(
        `SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = 'job_lease'::regclass AND contype = 'p'`,
      );
      expect(key.rows).toEqual([{ def: 'PRIMARY KEY (target_id)' }]);
      await dataSource.undoLastMigration(); // the preemption column
      const column = await admin.query(
        `SELECT 1 FROM information_schema.columns WHERE table_name = 'job_lease' AND column_name = 'preempt_of'`,
      );
      expect(column.rowCount).toBe(0);
      await dataSource.undoLastMigration(); // the slot_limit column
      const slotLimit = await admin.query(
        `SELECT 1 FROM information_schema.columns WHERE table_name = 'job_lease' AND column_name = 'slot_limit'`,
      );
      expect(slotLimit.rowCount).toBe(0);
      // Without the column single holders work, and a limited call says which migration to run. (Bootstrap itself
      // refuses tables without the later preemption and slot columns: they are put back by hand for this check, then
      // dropped.)
      await admin.query('ALTER TABLE job_lease ADD COLUMN preempt_of uuid');
      for (const statement of slotColumnStatements({
        schema: 'public',
        tableName: 'job_lease',
        waiterTableName: 'job_lease_waiter',
      })) {
        await admin.query(statement);
      }
      const unmigrated = new LeaseService(dataSource, {
        timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000, shutdownGraceMs: 0 },
      });
      await unmigrated.init();
      await (await unmigrated.tryAcquire('unmigrated'))!.release();
      const refused = await unmigrated.tryAcquire('unmigrated:semaphore', { limit: 2 }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(LeaseConfigError);
      expect((refused as Error).message).toMatch(/AddLeaseSlotLimit/);
      await unmigrated.close();
      await admin.query('ALTER TABLE job_lease DROP COLUMN preempt_of');
      await admin.query('ALTER TABLE job_lease DROP COLUMN slot, ADD PRIMARY KEY (target_id)');
      await dataSource.undoLastMigration(); // the token layout: one-way, nothing to undo
      await dataSource.undoLastMigration(); // the operator's tables
      const consoleLeft = await admin.query(
        `SELECT relname FROM pg_class WHERE relname LIKE 'job_lease\\_%' AND relkind = 'r' ORDER BY 1`,
      );
      expect(consoleLeft.rows.map((row) => row.relname)).toEqual(['job_lease_result', 'job_lease_waiter']);
      await dataSource.undoLastMigration(); // the join results
      const joined = await admin.query(`SELECT relname FROM pg_class WHERE relname LIKE 'job_lease_result%'`);
      expect(joined.rows).toEqual([]);
      await dataSource.undoLastMigration();
      const left = await admin.query(`SELECT relname FROM pg_class WHERE relname LIKE 'job_lease%'`);
      expect(left.rows).toEqual([]);
    } finally {
      await dataSource.destroy();
      await admin.end();
      await db.drop();
    }
  });

  test('custom names get their own migration name and objects; bad names are refused', () => {
    const [custom] = createLeaseMigrations({ schema: 'jobs', tableName: 'lease', waiterTableName: 'lease_waiter' });
    const [standard] = leaseMigrations;
    expect(new custom().name).not.toBe(new standard().name);
    expect(new custom().name).toMatch(/\d{13}$/);
    const [, , , customLayout] = createLeaseMigrations({
      schema: 'jobs',
      tableName: 'lease',
      waiterTableName: 'lease_waiter',
    });
    const [, , , standardLayout] = leaseMigrations;
    expect(new customLayout().name).toMatch(/^LeaseTokenLayout[0-9a-f]{8}1796169600000$/);
    expect(new standardLayout().name).toBe('LeaseTokenLayout1796169600000');
    expect(() => createLeaseMigrations({ tableName: 'a'.repeat(64) })).toThrow(/bytes/);
  });
});

/**
 * One schema, one source: after the migrations, TypeORM's own schema diff (what `synchronize` and
 * `migration:generate` run) finds nothing to change — no dropped CHECK constraint, no index or column rewritten.
 */
describe('the entities match the migrations', () => {
  test.each([
    ['default names', {}],
    ['custom names', { schema: 'jobs', tableName: 'lease', waiterTableName: 'lease_waiter' }],
    [
      'the longest names (constraint names cut to 63 bytes)',
      { tableName: 'l'.repeat(51), waiterTableName: 'w'.repeat(51) },
    ],
  ])('%s: after the migration the schema builder has no pending queries', async (_, names) => {
    const db = await createTestDatabase('schema-diff');
    const dataSource = new DataSource({
      type: 'postgres',
      url: db.url,
      entities: [...createLeaseEntities(names)],
      migrations: [...createLeaseMigrations(names)],
    });
    await dataSource.initialize();
    try {
      await dataSource.runMigrations();
      const pending = await dataSource.driver.createSchemaBuilder().log();
      expect(pending.upQueries.map((query) => query.query)).toEqual([]);
    } finally {
      await dataSource.destroy();
      await db.drop();
    }
  });
});

test('the CHECK constraint names written in the DDL are the ones PostgreSQL gives unnamed column checks (tables made by earlier versions)', async () => {
  const db = await createTestDatabase('check-names');
  const admin = await adminClient(db.url);
  try {
    for (const table of ['job_lease', 'l'.repeat(51), 'é'.repeat(25), 'x'.repeat(40)]) {
      for (const column of ['target_id', 'lease_timeout_ms', 'hold_ms', 'timeout_ms']) {
        const quoted = `"${table}"`;
        await admin.query(`CREATE TABLE ${quoted} (${column} integer CHECK (${column} > 0))`);
        const { rows } = await admin.query(
          `SELECT conname FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'c'`,
          [quoted],
        );
        expect(rows).toEqual([{ conname: columnCheckName(table, column) }]);
        await admin.query(`DROP TABLE ${quoted}`);
      }
    }
  } finally {
    await admin.end();
    await db.drop();
  }
});

test('an installation older than preempt: true: bootstrap names AddLeasePreemption; createSchema adds the column', async () => {
  const { db, admin, dataSource } = await migratable('before_preempt');
  try {
    await dataSource.runMigrations();
    await admin.query('ALTER TABLE job_lease DROP COLUMN preempt_of');
    const options = { timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000, shutdownGraceMs: 0 } };
    const refused = (await new LeaseService(dataSource, options).init().catch((error: unknown) => error)) as Error;
    expect(refused).toBeInstanceOf(LeaseConfigError);
    expect(refused.message).toMatch(/AddLeasePreemption1796342400000/);
    expect(refused.message).toMatch(/ADD COLUMN IF NOT EXISTS preempt_of uuid/);
    const service = new LeaseService(dataSource, mergeLeaseOptions(options, { tables: { createSchema: true } }));
    await service.init();
    const column = await admin.query(
      `SELECT data_type FROM information_schema.columns WHERE table_name = 'job_lease' AND column_name = 'preempt_of'`,
    );
    expect(column.rows).toEqual([{ data_type: 'uuid' }]);
    await service.close();
  } finally {
    await dataSource.destroy();
    await admin.end();
    await db.drop();
  }
});

test('synchronize: true before the migrations: bootstrap names the missing sequences and the statements to run', async () => {
  const db = await createTestDatabase('synchronized');
  const admin = await adminClient(db.url);
  const dataSource = new DataSource({ type: 'postgres', url: db.url, entities: [...leaseEntities], synchronize: true });
  await dataSource.initialize();
  try {
    const options = { timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000, shutdownGraceMs: 0 } };
    const refused = await new LeaseService(dataSource, options).init().catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(LeaseConfigError);
    const { message } = refused as Error;
    expect(message).toMatch(
      /the sequences "public"\."job_lease_fencing_seq", "public"\."job_lease_waiter_seq" are missing/,
    );
    expect(message).toMatch(/synchronize/);
    // What the message says to run is enough.
    const statements = message.slice(message.indexOf('run: ') + 5).split('; ');
    expect(statements[0]).toBe(
      'CREATE SEQUENCE IF NOT EXISTS "public"."job_lease_fencing_seq" AS bigint MINVALUE 1099511627776',
    );
    for (const statement of statements) await admin.query(statement);
    // Then the join result table (no entity declares it), with the statement the message gives.
    const again = (await new LeaseService(dataSource, options).init().catch((error: unknown) => error)) as Error;
    expect(again).toBeInstanceOf(LeaseConfigError);
    expect(again.message).toMatch(/AddLeaseJoinResults/);
    await admin.query(again.message.slice(again.message.indexOf('run: ') + 5));
    const service = new LeaseService(dataSource, options);
    await service.init();
    const lease = await service.tryAcquire('synchronized');
    expect(lease).not.toBeNull();
    await service.close();
  } finally {
    await dataSource.destroy();
    await admin.end();
    await db.drop();
  }
});
