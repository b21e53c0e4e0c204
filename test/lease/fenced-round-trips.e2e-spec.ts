import {
  leaseEntities,
  LeaseError,
  LeaseLostError,
  LeaseUnavailableError,
  type LeaseModuleOptions,
} from 'nest-pg-lease';
import pg from 'pg';
import { EntitySchema, type EntityManager } from 'typeorm';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';
import { openService, type DataSourceShape } from '../support/lease-service.js';
import { adminClient, FAST, ISOLATIONS, useTestDatabase } from '../support/db.js';

/**
 * The messages a fenced transaction sends on its own connection, counted on the wire side of `pg` (every
 * `pg.Client#query` call is one message to the server and one round trip): the lease-row lock and the token check
 * travel with BEGIN, so a one-write `fenced()` costs three round trips (BEGIN + lock, the write, COMMIT), with or
 * without `release: true` (the release rides in the COMMIT's message). TypeORM is told it is inside a transaction: its
 * `manager.save()` opens and commits none of its own, a nested `fenced()` is a savepoint.
 */
interface TripRow {
  id?: number;
  note: string;
}

const Trip = new EntitySchema<TripRow>({
  name: 'fenced_trip',
  columns: { id: { type: Number, primary: true, generated: true }, note: { type: String } },
});

/** Records every statement sent by any pg client of this process until `stop()`. */
function recordStatements() {
  const sent: Array<{ client: unknown; text: string; values: string }> = [];
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    const config = args[0] as string | { text?: string; values?: unknown[] };
    const text = typeof config === 'string' ? config : config?.text;
    const values = typeof config === 'string' ? args[1] : config?.values;
    if (typeof text === 'string') sent.push({ client: this, text, values: JSON.stringify(values ?? []) });
    return (query as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof query;
  return {
    stop: () => (pg.Client.prototype.query = query),
    /** The statements sent on the connection that sent `marker` (in a text or a value: the fenced transaction's). */
    on: (marker: string) => {
      const client = sent.find((one) => one.text.includes(marker) || one.values.includes(marker))?.client;
      if (!client) throw new Error(`no statement sent with ${marker}`);
      return sent.filter((one) => one.client === client).map((one) => one.text.trim());
    },
  };
}

const BEGIN_AND_LOCK = expect.stringMatching(/^BEGIN\b[\s\S]*FOR UPDATE/);

describe.each(ISOLATIONS)('fenced() round trips (default_transaction_isolation = %s)', (isolation) => {
  const db = useTestDatabase('fenced_trips', isolation, (admin) =>
    admin.query('CREATE TABLE fenced_trip (id serial PRIMARY KEY, note text NOT NULL)'),
  );
  /** A service named `name`; `shape`: more of its DataSource (one connection, `pg` settings). */
  const open = (name: string, options: LeaseModuleOptions = {}, shape: Omit<DataSourceShape, 'applicationName'> = {}) =>
    openService(db.url, mergeLeaseOptions({ tables: { createSchema: true } }, FAST, options), {
      applicationName: name,
      entities: [...leaseEntities, Trip],
      ...shape,
    });
  const notes = async () =>
    (await db.admin.query<{ note: string }>('SELECT note FROM fenced_trip ORDER BY id')).rows.map((row) => row.note);

  beforeEach(() => db.admin.query('TRUNCATE fenced_trip'));

  test('a one-write fenced(): three messages — BEGIN with the lock and token check, the write, COMMIT', async () => {
    const a = await open('trips-one');
    try {
      const lease = (await a.service.tryAcquire('trips:one'))!;
      const recording = recordStatements();
      try {
        await lease.fenced((manager) => manager.query(`INSERT INTO fenced_trip (note) VALUES ('one-write')`));
      } finally {
        recording.stop();
      }
      expect(recording.on('one-write')).toEqual([
        BEGIN_AND_LOCK,
        `INSERT INTO fenced_trip (note) VALUES ('one-write')`,
        'COMMIT',
      ]);
      expect(await notes()).toEqual(['one-write']);
      expect(lease.isHeld()).toBe(true);
      await lease.release();
    } finally {
      await a.close();
    }
  });

  test('fenced(work, { release: true }): the release rides in the COMMIT message — still three', async () => {
    const a = await open('trips-release');
    try {
      const lease = (await a.service.tryAcquire('trips:release'))!;
      const recording = recordStatements();
      try {
        await lease.fenced((manager) => manager.query(`INSERT INTO fenced_trip (note) VALUES ('saved')`), {
          release: true,
        });
      } finally {
        recording.stop();
      }
      expect(recording.on('saved')).toEqual([
        BEGIN_AND_LOCK,
        `INSERT INTO fenced_trip (note) VALUES ('saved')`,
        expect.stringMatching(/SET lease_token = NULL[\s\S]*;\s*COMMIT$/),
      ]);
      expect(await notes()).toEqual(['saved']);
      expect(lease.isHeld()).toBe(false);
      const row = await db.admin.query(`SELECT lease_token FROM job_lease WHERE target_id = 'trips:release'`);
      expect(row.rows[0].lease_token).toBeNull();
    } finally {
      await a.close();
    }
  });

  test('the lock and the release are prepared on the connection: planned once per connection, not per call', async () => {
    const a = await open('trips-prepared', {}, { poolSize: 1 });
    try {
      // What the transaction's own connection has prepared, and how often each was executed there (PostgreSQL 14+).
      const prepared = async (manager: EntityManager) =>
        Object.fromEntries(
          (
            await manager.query<Array<{ name: string; runs: number }>>(
              `SELECT regexp_replace(name, '^.*_(fence_[a-z_]+|scans_off)$', '\\1') AS name,
                 (generic_plans + custom_plans)::int AS runs
               FROM pg_prepared_statements WHERE name LIKE '%fence%' OR name = 'nest_pg_lease_scans_off'`,
            )
          ).map((row) => [row.name, row.runs]),
        );
      const lease = (await a.service.tryAcquire('trips:prepared'))!;
      const seen: Array<Record<string, number>> = [];
      for (let call = 0; call < 3; call++)
        await lease.fenced(async (manager) => void seen.push(await prepared(manager)));
      await lease.fenced((manager) => manager.query(`INSERT INTO fenced_trip (note) VALUES ('prepared')`), {
        release: true,
      });
      const again = (await a.service.tryAcquire('trips:prepared'))!;
      await again.fenced(async (manager) => void seen.push(await prepared(manager)), { release: true });
      // One connection: the lock parsed on the first call and run again by the next ones, the release once prepared;
      // the statement that turns scans off before them (exchange.ts) too, run once per exchange.
      expect(seen).toEqual([
        { fence_lock: 1, scans_off: 1 },
        { fence_lock: 2, scans_off: 2 },
        { fence_lock: 3, scans_off: 3 },
        { fence_lock: 5, fence_release: 1, scans_off: 6 },
      ]);
      expect(await notes()).toEqual(['prepared']);
    } finally {
      await a.close();
    }
  });

  test('the application deallocates its prepared statements: the next fenced() prepares them again and commits', async () => {
    const a = await open('trips-deallocated', {}, { poolSize: 1 });
    try {
      // The lock and the release prepared on the one connection.
      const first = (await a.service.tryAcquire('trips:deallocated'))!;
      await first.fenced((manager) => manager.query(`INSERT INTO fenced_trip (note) VALUES ('before')`), {
        release: true,
      });
      // That connection forgets every prepared statement (an application's DEALLOCATE ALL, or DISCARD ALL): the
      // lock step fails on the first name it binds, and the release must not fail on the next.
      for (const reset of ['DEALLOCATE ALL', 'DISCARD ALL']) {
        const lease = (await a.service.tryAcquire('trips:deallocated'))!;
        await a.dataSource.query(reset);
        await lease.fenced((manager) => manager.query(`INSERT INTO fenced_trip (note) VALUES ($1)`, [reset]), {
          release: true,
        });
        expect(lease.isHeld()).toBe(false);
      }
      expect(await notes()).toEqual(['before', 'DEALLOCATE ALL', 'DISCARD ALL']);
      // Dropped by the work itself, after the lock step: the release riding on COMMIT fails, and all rolls back.
      const inside = (await a.service.tryAcquire('trips:deallocated'))!;
      await expect(
        inside.fenced(
          async (manager) => {
            await manager.query(`INSERT INTO fenced_trip (note) VALUES ('inside')`);
            await manager.query('DEALLOCATE ALL');
          },
          { release: true },
        ),
      ).rejects.toBeInstanceOf(LeaseUnavailableError);
      expect(await notes()).toEqual(['before', 'DEALLOCATE ALL', 'DISCARD ALL']);
      // The next one prepares them again.
      await inside.fenced((manager) => manager.query(`INSERT INTO fenced_trip (note) VALUES ('after')`), {
        release: true,
      });
      expect(await notes()).toEqual(['before', 'DEALLOCATE ALL', 'DISCARD ALL', 'after']);
    } finally {
      await a.close();
    }
  });

  test("a DataSource in pg's pipeline mode: fenced() goes as simple-query messages, the release riding on COMMIT", async () => {
    const a = await open('trips-pipeline', {}, { extra: { pipeline: true } });
    try {
      const lease = (await a.service.tryAcquire('trips:pipeline'))!;
      await lease.fenced((manager) => manager.query(`INSERT INTO fenced_trip (note) VALUES ('pipelined')`));
      await lease.fenced((manager) => manager.query(`INSERT INTO fenced_trip (note) VALUES ('pipelined-last')`), {
        release: true,
      });
      expect(await notes()).toEqual(['pipelined', 'pipelined-last']);
      expect(lease.isHeld()).toBe(false);
    } finally {
      await a.close();
    }
  });

  test("the work runs with the connection's own planner settings (the lock is planned with scans off, then not)", async () => {
    const setting = async (manager: EntityManager) =>
      (await manager.query<Array<{ enable_seqscan: string }>>('SHOW enable_seqscan'))[0].enable_seqscan;
    const a = await open('trips-planner', {}, { poolSize: 1 });
    try {
      const lease = (await a.service.tryAcquire('trips:planner'))!;
      const seen: string[] = [];
      // Past the five custom plans: the lock's generic plan is made, and used, by the last calls.
      for (let call = 0; call < 7; call++)
        await lease.fenced(async (manager) => void seen.push(await setting(manager)));
      // The one connection's session turns scans off (a plain SET, kept after the commit): the next work sees it.
      await lease.fenced((manager) => manager.query('SET enable_seqscan = off'));
      const sessionOff = await lease.fenced(setting);
      await lease.fenced((manager) => manager.query('RESET enable_seqscan'));
      expect([...new Set(seen), sessionOff]).toEqual(['on', 'off']);
      await lease.release();
    } finally {
      await a.close();
    }
  });

  test("manager.save() inside the work opens no transaction of its own (TypeORM knows it is in the fence's)", async () => {
    const a = await open('trips-save');
    try {
      const lease = (await a.service.tryAcquire('trips:save'))!;
      const recording = recordStatements();
      try {
        await lease.fenced((manager) => manager.save(Trip, { note: 'entity-save' }));
      } finally {
        recording.stop();
      }
      expect(recording.on('fenced_trip')).toEqual([
        BEGIN_AND_LOCK,
        expect.stringMatching(/^INSERT INTO "fenced_trip"/),
        'COMMIT',
      ]);
      expect(await notes()).toEqual(['entity-save']);
      await lease.release();
    } finally {
      await a.close();
    }
  });

  test('a nested fenced() is a savepoint: its failure rolls back only its part; an error of the work rolls back all', async () => {
    const a = await open('trips-nested');
    try {
      const lease = (await a.service.tryAcquire('trips:nested'))!;
      const recording = recordStatements();
      try {
        await lease.fenced(async (manager) => {
          await manager.query(`INSERT INTO fenced_trip (note) VALUES ('outer')`);
          await expect(
            lease.fenced(async (inner) => {
              await inner.query(`INSERT INTO fenced_trip (note) VALUES ('inner')`);
              throw new Error('the part failed');
            }),
          ).rejects.toThrow('the part failed');
        });
      } finally {
        recording.stop();
      }
      expect(recording.on('outer')).toEqual([
        BEGIN_AND_LOCK,
        `INSERT INTO fenced_trip (note) VALUES ('outer')`,
        'SAVEPOINT typeorm_1',
        `INSERT INTO fenced_trip (note) VALUES ('inner')`,
        'ROLLBACK TO SAVEPOINT typeorm_1',
        'COMMIT',
      ]);
      expect(await notes()).toEqual(['outer']);

      const failing = recordStatements();
      try {
        await expect(
          lease.fenced(async (manager) => {
            await manager.query(`INSERT INTO fenced_trip (note) VALUES ('rolled-back')`);
            throw new Error('the work failed');
          }),
        ).rejects.toThrow('the work failed');
      } finally {
        failing.stop();
      }
      expect(failing.on('rolled-back')).toEqual([
        BEGIN_AND_LOCK,
        `INSERT INTO fenced_trip (note) VALUES ('rolled-back')`,
        'ROLLBACK',
      ]);
      expect(await notes()).toEqual(['outer']);
      expect(lease.isHeld()).toBe(true);
      await lease.release();
    } finally {
      await a.close();
    }
  });

  test('a key that needs quoting (quote, backslash, newline, comment) locks and releases exactly its own row', async () => {
    const a = await open('trips-quoted');
    const key = `trips:o'brien\\x -- "y"\n/* z */ $1`;
    try {
      const lease = (await a.service.tryAcquire(key))!;
      const neighbour = (await a.service.tryAcquire('trips:o'))!;
      await lease.fenced((manager) => manager.query(`INSERT INTO fenced_trip (note) VALUES ('quoted')`), {
        release: true,
      });
      expect(await notes()).toEqual(['quoted']);
      const rows = await db.admin.query<{ target_id: string; held: boolean }>(
        `SELECT target_id, lease_token IS NOT NULL AS held FROM job_lease WHERE target_id IN ('trips:o', $1) ORDER BY 1`,
        [key],
      );
      expect(rows.rows).toEqual([
        { target_id: 'trips:o', held: true },
        { target_id: key, held: false },
      ]);
      expect(neighbour.isHeld()).toBe(true);
      await neighbour.release();
    } finally {
      await a.close();
    }
  });

  test("a lock step that fails (the row held by another past the lease's deadline): nothing ran, rolled back", async () => {
    const a = await open('trips-lock-fails');
    const blocker = await adminClient(db.url);
    try {
      const lease = (await a.service.tryAcquire('trips:locked'))!;
      await blocker.query('BEGIN');
      await blocker.query(`SELECT 1 FROM job_lease WHERE target_id = 'trips:locked' FOR UPDATE`);
      let ran = false;
      const recording = recordStatements();
      try {
        // The lock waits until the lease's local deadline (leaseTimeoutMs 1 s), then fails: 55P03, or the lease lost.
        await expect(lease.fenced(async () => (ran = true))).rejects.toBeInstanceOf(LeaseError);
      } finally {
        recording.stop();
      }
      expect(ran).toBe(false);
      expect(recording.on('trips:locked')).toEqual([BEGIN_AND_LOCK, 'ROLLBACK']);
    } finally {
      await blocker.query('ROLLBACK').catch(() => undefined);
      await blocker.end();
      await a.close();
    }
  });

  test('a stale token is refused before any statement of the work: BEGIN with the lock, then ROLLBACK', async () => {
    // Heartbeats every 2 s: the holder learns of the takeover from its fenced() call, not from a renewal.
    const a = await open('trips-stale', { timing: { heartbeatIntervalMs: 2_000, leaseTimeoutMs: 6_000 } });
    try {
      const old = (await a.service.tryAcquire('trips:stale'))!;
      // Taken over while its holder still believes it holds the lease (its next renewal has not run).
      await db.admin.query(`UPDATE job_lease SET lease_token = gen_random_uuid() WHERE target_id = 'trips:stale'`);
      let ran = false;
      const recording = recordStatements();
      try {
        await expect(
          old.fenced(async (manager) => {
            ran = true;
            await manager.query(`INSERT INTO fenced_trip (note) VALUES ('stale')`);
          }),
        ).rejects.toBeInstanceOf(LeaseLostError);
      } finally {
        recording.stop();
      }
      expect(ran).toBe(false);
      expect(recording.on('trips:stale')).toEqual([BEGIN_AND_LOCK, 'ROLLBACK']);
      expect(await notes()).toEqual([]);
    } finally {
      await a.close();
    }
  });
});
