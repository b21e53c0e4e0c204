import { randomBytes } from 'node:crypto';
import { LeaseConfigError, type Lease, type LeaseModuleOptions, LeaseService } from 'nest-pg-lease';
import type { EntityManager } from 'typeorm';
import { adminClient, eventually, FAST, makeDataSource, startService, useTestDatabase } from '../support/db.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

/**
 * The library under a least-privileged role: only SELECT, INSERT, UPDATE, DELETE on its two tables and USAGE on its
 * two sequences (the GRANTs of docs/privileges.md); the tables made by the owner. A role missing a right is told which, at
 * bootstrap.
 */
/**
 * Renewals the cases count: a 300 ms heartbeat bounds each to about 450 ms (the test timings' 100 ms bound saw no
 * renewal land in 10 s at load 9). Nothing here waits for an expiry (the takeover's row is written expired).
 */
const ROOMY = { timing: { heartbeatIntervalMs: 300, leaseTimeoutMs: 3_000 } };

describe('least privilege', () => {
  const db = useTestDatabase('privilege');
  const role = `lease_app_${randomBytes(4).toString('hex')}`;
  const password = randomBytes(12).toString('hex');
  let appUrl: string;

  /** The GRANTs of docs/privileges.md, exactly. */
  const grants = [
    `GRANT SELECT, INSERT, UPDATE, DELETE ON job_lease, job_lease_waiter TO ${role}`,
    `GRANT USAGE ON SEQUENCE job_lease_fencing_seq, job_lease_waiter_seq TO ${role}`,
  ];

  beforeAll(async () => {
    const owner = await startService(db.url); // the owner (a superuser here) runs the migrations
    await owner.close();
    await db.admin.query(`CREATE ROLE ${role} LOGIN PASSWORD '${password}'`);
    // No CREATE on schema public but through a grant: PostgreSQL 15's default; up to 14 every role has it.
    await db.admin.query('REVOKE CREATE ON SCHEMA public FROM PUBLIC');
    for (const grant of grants) await db.admin.query(grant);
    // The application's own table, written inside the fence.
    await db.admin.query(
      'CREATE TABLE report (id bigserial PRIMARY KEY, target text NOT NULL, fencing_token bigint NOT NULL)',
    );
    await db.admin.query(`GRANT SELECT, INSERT ON report TO ${role}; GRANT USAGE ON SEQUENCE report_id_seq TO ${role}`);
    const url = new URL(db.url);
    url.username = role;
    url.password = password;
    appUrl = url.toString();
  });

  /** The application's write inside the fence. */
  const save = (manager: EntityManager, lease: Lease) =>
    manager.query('INSERT INTO report (target, fencing_token) VALUES ($1, $2)', [
      lease.targetKey,
      lease.fencingToken.toString(),
    ]);

  /** Bootstraps a service as the role; resolves with the bootstrap error, or undefined when it started. */
  async function bootstrapError(options: LeaseModuleOptions): Promise<unknown> {
    const dataSource = makeDataSource(appUrl);
    await dataSource.initialize();
    const service = new LeaseService(dataSource, mergeLeaseOptions(FAST, options));
    try {
      await service.init();
      return undefined;
    } catch (error) {
      return error;
    } finally {
      await service.close();
      await dataSource.destroy();
    }
  }

  // Runs after useTestDatabase's drop (afterAll hooks run in the order declared), which ends the role's sessions and
  // drops what was granted on the database's objects.
  afterAll(async () => {
    const server = await adminClient(new URL('/postgres', db.url).toString());
    await server.query(`DROP ROLE IF EXISTS ${role}`);
    await server.end();
  });

  test('acquire, take over, wait, heartbeat, fenced write, release and list all run with only the GRANTs', async () => {
    const a = await startService(appUrl, { tables: { createSchema: false }, owner: 'a', ...ROOMY });
    const b = await startService(appUrl, {
      ...ROOMY,
      tables: { createSchema: false },
      owner: 'b',
      connections: { asyncReleaseCommits: true },
    });
    try {
      const renewed: string[] = [];
      a.service.events$.subscribe((event) => event.type === 'renewed' && renewed.push(event.targetKey));
      const held = (await a.service.tryAcquire('report:1'))!;
      expect(held).not.toBeNull();
      expect(await b.service.tryAcquire('report:1')).toBeNull();
      await eventually(
        () => renewed.length,
        (n) => n >= 3,
        'three heartbeats',
      );

      // A waiter: queued, heartbeating, granted on release (NOTIFY), its row deleted.
      const waiting = b.service.acquire('report:1', { priority: 5, onBusy: { wait: { timeoutMs: 20_000 } } });
      const queued = (rows: Array<{ state: string }>) => rows.some((row) => row.state === 'waiting');
      await eventually(() => a.service.list('report:1'), queued, 'queued');
      await held.fenced((manager) => save(manager, held));
      await held.release();
      const granted: Lease = await waiting;
      expect(granted.fencingToken).toBeGreaterThan(held.fencingToken);
      // The token's high bits are the server's timeline, read by the role inside the acquire statement.
      expect([held.fencingToken >> 47n, granted.fencingToken >> 47n]).toEqual([1n, 1n]);

      // A waiter that gives up removes its own row.
      const late = a.service.acquire('report:1', { priority: 1, onBusy: { wait: { timeoutMs: 300 } } });
      await expect(late).rejects.toThrow(/Gave up waiting/);
      await granted.fenced((manager) => save(manager, granted));
      await granted.release();

      // A takeover of an expired lease (the row's timeout has passed): an UPDATE of someone else's row.
      await db.admin
        .query(`INSERT INTO job_lease VALUES ('report:2', gen_random_uuid(), nextval('job_lease_fencing_seq'),
        'dead', 0, 1000, now() - interval '1 hour', now() - interval '1 hour')`);
      const takeover = (await a.service.tryAcquire('report:2'))!;
      expect(takeover).not.toBeNull();
      await takeover.release();

      expect(await a.service.list()).toEqual([]);
      const rows = (await db.admin.query('SELECT fencing_token::text FROM report ORDER BY id')).rows;
      const tokens = rows.map((row) => BigInt(row.fencing_token));
      expect(tokens).toEqual([held.fencingToken, granted.fencingToken]);
      const [who] = await a.dataSource.query('SELECT current_user AS role');
      expect(who.role).toBe(role);
    } finally {
      await a.close();
      await b.close();
    }
  });

  test('pg_control_system() revoked (as managed services may): heartbeats go on, the timeline decides', async () => {
    // Function rights live in the database's own catalog: this changes only the test's database.
    await db.admin.query('REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC');
    const a = await startService(appUrl, { tables: { createSchema: false }, owner: 'a', ...ROOMY });
    try {
      const lost: string[] = [];
      let renewals = 0;
      a.service.events$.subscribe((event) => {
        if (event.type === 'lost') lost.push(event.reason);
        if (event.type === 'renewed') renewals++;
      });
      const lease = (await a.service.tryAcquire('report:3'))!;
      await eventually(
        () => renewals,
        (n) => n >= 3,
        'three heartbeats',
      );
      expect(lost).toEqual([]);
      expect(lease.isHeld()).toBe(true);
      await lease.release();

      // The application's role may read it, the heartbeat's (sessionUrl) may not: found out at the first renewal.
      const mixed = await startService(db.url, {
        ...ROOMY,
        tables: { createSchema: false },
        owner: 'mixed',
        connections: { sessionUrl: appUrl },
      });
      try {
        let mixedRenewals = 0;
        const mixedLost: string[] = [];
        mixed.service.events$.subscribe((event) => {
          if (event.type === 'lost') mixedLost.push(event.reason);
          if (event.type === 'renewed') mixedRenewals++;
        });
        const held = (await mixed.service.tryAcquire('report:4'))!;
        await eventually(
          () => mixedRenewals,
          (n) => n >= 3,
          'three heartbeats on the sessionUrl role',
        );
        expect(mixedLost).toEqual([]);
        await held.release();
      } finally {
        await mixed.close();
      }
    } finally {
      await a.close();
      await db.admin.query('GRANT EXECUTE ON FUNCTION pg_control_system() TO PUBLIC');
    }
  });

  test('createSchema: true with the tables in place needs no CREATE right', async () => {
    expect(await bootstrapError({ tables: { createSchema: true } })).toBeUndefined();
  });

  test.each([
    [
      'DELETE on the waiter table',
      `REVOKE DELETE ON job_lease_waiter FROM ${role}`,
      /DELETE on "public"\."job_lease_waiter"/,
    ],
    [
      'USAGE on the fencing sequence',
      `REVOKE USAGE ON SEQUENCE job_lease_fencing_seq FROM ${role}`,
      /USAGE on sequence "public"\."job_lease_fencing_seq"/,
    ],
    ['UPDATE on the lease table', `REVOKE UPDATE ON job_lease FROM ${role}`, /UPDATE on "public"\."job_lease"/],
  ])(
    'a role without %s is refused at bootstrap with a LeaseConfigError naming the right',
    async (_what, revoke, named) => {
      await db.admin.query(revoke);
      try {
        const error = await bootstrapError({ tables: { createSchema: false } });
        expect(error).toBeInstanceOf(LeaseConfigError);
        expect(String((error as Error).message)).toMatch(named);
        expect(String((error as Error).message)).toMatch(new RegExp(`GRANT .* TO "?${role}"?`));
      } finally {
        for (const grant of grants) await db.admin.query(grant);
      }
    },
  );

  test('a new server whose sequence stands below the tables: without UPDATE on it the bootstrap says what to run', async () => {
    // Tokens drawn far up the sequence (as on blue), then the sequence back at its start (a green cluster the rows
    // were copied to by logical replication, which copies no sequence value).
    await db.admin.query(`SELECT setval('job_lease_fencing_seq', (1::bigint << 40) + 10000000)`);
    const blue = await startService(db.url, { tables: { createSchema: false }, owner: 'blue' });
    await blue.service.tryAcquire('copied:1').then((lease) => lease!.release());
    await blue.close();
    const { rows } = await db.admin.query<{ t: string }>(`SELECT max(fencing_token)::text AS t FROM job_lease`);
    const top = BigInt(rows[0].t);
    const restart = () => db.admin.query(`ALTER SEQUENCE job_lease_fencing_seq RESTART`);
    await restart();
    try {
      // USAGE only: setval is refused, so is the bootstrap — never a token below those in the table.
      const refused = await bootstrapError({ tables: { createSchema: false } });
      expect(refused).toBeInstanceOf(LeaseConfigError);
      const message = String((refused as Error).message);
      expect(message).toMatch(/stand below the values in the lease tables/);
      expect(message).toMatch(/GRANT UPDATE ON SEQUENCE "public"\."job_lease_fencing_seq" TO/);
      // The owner runs what the message says; the role starts, its tokens above the table's.
      await db.admin.query(/run: (SELECT setval\(.*\)); or GRANT/.exec(message)![1]);
      const green = await startService(appUrl, { tables: { createSchema: false }, owner: 'green' });
      try {
        const lease = (await green.service.tryAcquire('copied:2'))!;
        expect(lease.fencingToken).toBeGreaterThan(top);
        await lease.release();
      } finally {
        await green.close();
      }
      // Or the GRANT: the role's own bootstrap raises it.
      await restart();
      await db.admin.query(`GRANT UPDATE ON SEQUENCE job_lease_fencing_seq TO ${role}`);
      expect(await bootstrapError({ tables: { createSchema: false } })).toBeUndefined();
      const { rows: raised } = await db.admin.query<{ v: string }>(
        `SELECT last_value::text AS v FROM job_lease_fencing_seq`,
      );
      expect(BigInt(raised[0].v)).toBeGreaterThan(top & ((1n << 47n) - 1n));
    } finally {
      await db.admin.query(`REVOKE UPDATE ON SEQUENCE job_lease_fencing_seq FROM ${role}`);
      for (const grant of grants) await db.admin.query(grant);
    }
  });

  test('createSchema: true with tables missing and no CREATE right: a LeaseConfigError naming CREATE on the schema', async () => {
    const missingTables = { tableName: 'other_lease', waiterTableName: 'other_waiter' };
    const error = await bootstrapError({ tables: { createSchema: true, ...missingTables } });
    expect(error).toBeInstanceOf(LeaseConfigError);
    expect(String((error as Error).message)).toMatch(/CREATE on schema "public"/);
    expect(String((error as Error).message)).toMatch(/leaseMigrations/);
  });
});
