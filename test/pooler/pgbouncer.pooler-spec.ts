import { Logger } from '@nestjs/common';
import { type Lease, type LeaseEvent, type LeaseModuleOptions, LeaseService } from 'nest-pg-lease';
import pg from 'pg';
import type { EntityManager } from 'typeorm';
import { adminClient, createTestDatabase, eventually, makeDataSource, serverUrl, startService } from '../support/db.js';
import { type PgBouncer, startPgBouncer } from './pgbouncer.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

/**
 * nest-pg-lease behind a real PgBouncer in `pool_mode = transaction` (Debian's 1.18, no prepared-statement support):
 * server connections are shared between clients statement by statement, named prepared statements leak between
 * clients, LISTEN never delivers. `pooler: 'transaction'` and `sessionUrl` make the library work there.
 */
const POOL_SIZE = 4;
/**
 * Timings a loaded CI machine keeps (renewals and releases must complete within one interval, and connections to
 * the pooler queue for its few server connections); the main suite's 100 ms interval is for loopback without load.
 */
const TIMING: LeaseModuleOptions = {
  timing: { heartbeatIntervalMs: 300, leaseTimeoutMs: 3_000, waiterTimeoutMs: 1_500, waitPollIntervalMs: 500 },
};
const BOOTSTRAP_WARNING = /^pooler: 'transaction' without sessionUrl/;
/** `pg`'s message when a connection is not established within `connectionTimeoutMillis`. */
/** The drain cache's read timing out behind the saturated pooler (the statement pool's bound), said once. */
const DRAIN_READ = /^Reading the drains failed \(the last view holds; retried\): Error: Query read timeout$/;
const CONNECT_TIMEOUT = /^Heartbeat of \d+ lease\(s\) failed \(Error: timeout expired\); retrying next tick$/;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** The application's write inside the fence. */
const write = (manager: EntityManager, target: string, lease: Lease, worker = 0) =>
  manager.query('INSERT INTO fenced_write (target, fencing_token, worker) VALUES ($1, $2, $3)', [
    target,
    lease.fencingToken.toString(),
    worker,
  ]);
/** Rows in the waiter table, for waiting until a waiter is queued. */
const waiterRows = (admin: pg.Client) =>
  admin.query('SELECT count(*)::int AS n FROM job_lease_waiter').then((result) => result.rows[0].n as number);

describe('behind PgBouncer in transaction mode', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let bouncer: PgBouncer;
  let pooledUrl: string;
  let admin: pg.Client;
  const warnings: string[] = [];
  const running: Array<{ close: () => Promise<void> }> = [];
  /**
   * Warnings and errors logged by the library, less the expected bootstrap warning without sessionUrl and heartbeat
   * ticks whose connection could not be opened within one interval (a loaded CI machine; the next tick retries, and
   * a lost lease is asserted separately), and the operator's drain cache reading its table through a pooler the test
   * saturates on purpose (once per failure streak; the last view holds). A prepared-statement error, above all, is
   * never excused.
   */
  const unexpected = () =>
    warnings.filter(
      (message) => !BOOTSTRAP_WARNING.test(message) && !CONNECT_TIMEOUT.test(message) && !DRAIN_READ.test(message),
    );

  beforeAll(async () => {
    Logger.overrideLogger({
      log: () => undefined,
      warn: (message: unknown) => warnings.push(String(message)),
      error: (message: unknown) => warnings.push(String(message)),
    });
    db = await createTestDatabase('pooler');
    const owner = await startService(db.url); // creates the lease tables, directly on the server
    await owner.close();
    admin = await adminClient(db.url);
    await admin.query(`CREATE TABLE fenced_write (id bigserial PRIMARY KEY, target text NOT NULL,
      fencing_token bigint NOT NULL, worker integer NOT NULL)`);
    bouncer = await startPgBouncer(serverUrl(), { poolMode: 'transaction', poolSize: POOL_SIZE });
    pooledUrl = bouncer.via(db.url);
  });

  afterEach(async () => {
    await Promise.all(running.splice(0).map((service) => service.close()));
    await admin.query('TRUNCATE fenced_write');
    warnings.length = 0;
  });

  afterAll(async () => {
    Logger.overrideLogger(false);
    await admin?.end();
    await bouncer?.stop();
    await db?.drop();
  });

  /** One "app instance": a DataSource through the bouncer and a LeaseService on it. */
  async function instance(name: string, options: LeaseModuleOptions) {
    const dataSource = makeDataSource(pooledUrl, { poolSize: 3, applicationName: name });
    await dataSource.initialize();
    const service = new LeaseService(
      dataSource,
      mergeLeaseOptions(TIMING, { connections: { pooler: 'transaction' } }, options),
    );
    const events: LeaseEvent[] = [];
    service.events$.subscribe((event) => events.push(event));
    const started = {
      service,
      dataSource,
      events,
      close: async () => {
        await service.close();
        if (dataSource.isInitialized) await dataSource.destroy();
      },
    };
    running.push(started);
    await service.init();
    return started;
  }

  type Instance = Awaited<ReturnType<typeof instance>>;

  /**
   * Each worker: acquire (try, or wait in line every fourth round) → fenced insert → release, alternating its own
   * key and one shared key. Returns every error other than busy.
   */
  async function cycles(workers: Instance[], rounds: number) {
    const errors: string[] = [];
    let busy = 0;
    let saved = 0;
    await Promise.all(
      workers.map(async ({ service }, worker) => {
        for (let round = 0; round < rounds; round++) {
          const key = round % 2 === 0 ? `own:${worker}` : 'shared';
          try {
            const lease =
              round % 4 === 3
                ? await service.acquire(key, { priority: worker % 3, onBusy: { wait: { timeoutMs: 30_000 } } })
                : await service.tryAcquire(key);
            if (!lease) {
              busy++;
              continue;
            }
            try {
              await sleep(round % 3 === 0 ? 1.5 * TIMING.timing!.heartbeatIntervalMs! : 10); // some holds span heartbeats
              await lease.fenced((manager) => write(manager, key, lease, worker));
              saved++;
            } finally {
              await lease.release();
            }
          } catch (error) {
            errors.push(String(error));
          }
        }
      }),
    );
    return { errors, busy, saved };
  }

  async function expectCleanHistory(saved: number, workers: number, rounds: number) {
    const { rows } = await admin.query(
      'SELECT target, array_agg(fencing_token::text ORDER BY id) AS tokens FROM fenced_write GROUP BY target',
    );
    const total = rows.reduce((sum, row) => sum + row.tokens.length, 0);
    expect(total).toBe(saved);
    for (let worker = 0; worker < workers; worker++) {
      expect(rows.find((row) => row.target === `own:${worker}`)?.tokens.length).toBe(rounds / 2);
    }
    for (const row of rows) {
      const tokens = row.tokens.map(BigInt);
      expect(tokens.every((token: bigint, i: number) => i === 0 || token > tokens[i - 1])).toBe(true);
    }
    const left = (
      await admin.query(
        'SELECT (SELECT count(*) FROM job_lease WHERE lease_token IS NOT NULL)::int AS leases, ' +
          '(SELECT count(*) FROM job_lease_waiter)::int AS waiters',
      )
    ).rows[0];
    expect(left).toEqual({ leases: 0, waiters: 0 }); // every release (a row without a token) and dequeue went through
  }

  describe.each([
    ['with sessionUrl', true],
    ['without sessionUrl', false],
  ])('%s', (_label, withSession) => {
    const session = () => (withSession ? { connections: { sessionUrl: db.url } } : {});

    test('8 workers × acquire → fenced insert → release on own and shared keys: no error other than busy', async () => {
      const workers = await Promise.all(Array.from({ length: 8 }, (_, i) => instance(`worker-${i}`, session())));
      const rounds = 12;
      const { errors, busy, saved } = await cycles(workers, rounds);
      console.log(
        `[pooler ${_label}] 8 workers × ${rounds} rounds: ${saved} fenced saves, ${busy} busy, ${errors.length} errors`,
      );
      expect(errors).toEqual([]);
      expect(unexpected()).toEqual([]);
      expect(workers.flatMap((w) => w.events).filter((event) => event.type === 'lost')).toEqual([]);
      expect(workers.flatMap((w) => w.events).some((event) => event.type === 'renewed')).toBe(true);
      await expectCleanHistory(saved, 8, rounds);
    });

    test('a lease is held for 3 × leaseTimeoutMs, renewed all along, then saves fenced', async () => {
      const holder = await instance('holder', session());
      const lease = (await holder.service.tryAcquire('long'))!;
      expect(lease).not.toBeNull();
      await sleep(3 * TIMING.timing!.leaseTimeoutMs!);
      expect(lease.isHeld()).toBe(true);
      expect(lease.signal.aborted).toBe(false);
      const renewed = holder.events.filter((event) => event.type === 'renewed').length;
      expect(renewed).toBeGreaterThanOrEqual(10);
      expect(holder.events.filter((event) => event.type === 'lost')).toEqual([]);
      expect(unexpected()).toEqual([]); // no renewal failed, but for a connect timeout under load
      await lease.fenced((manager) => write(manager, 'long', lease));
      await lease.release();
      expect(unexpected()).toEqual([]);
    });
  });

  test('a second app instance reuses the server connections the first one used, without errors', async () => {
    const backends = async (workers: Instance[]) => {
      const pids = await Promise.all(
        workers.flatMap((w) => Array.from({ length: 4 }, () => w.dataSource.query('SELECT pg_backend_pid() AS pid'))),
      );
      return new Set(pids.map((rows: Array<{ pid: number }>) => rows[0].pid));
    };
    const first = await Promise.all(
      [0, 1, 2, 3].map((i) => instance(`first-${i}`, { connections: { sessionUrl: db.url } })),
    );
    const firstRun = await cycles(first, 8);
    const firstBackends = await backends(first);
    await Promise.all(running.splice(0).map((service) => service.close()));
    await admin.query('TRUNCATE fenced_write');

    const second = await Promise.all(
      [0, 1, 2, 3].map((i) => instance(`second-${i}`, { connections: { sessionUrl: db.url } })),
    );
    const secondRun = await cycles(second, 8);
    const secondBackends = await backends(second);
    const shared = [...secondBackends].filter((pid) => firstBackends.has(pid));
    console.log(
      `[pooler] second instance: ${secondRun.saved} saves, ${secondRun.busy} busy, ${secondRun.errors.length} errors; ` +
        `server backends shared with the first: ${shared.length} of ${secondBackends.size}`,
    );
    expect(firstRun.errors).toEqual([]);
    expect(shared.length).toBeGreaterThan(0); // the bouncer did hand the first instance's server connections over
    expect(secondRun.errors).toEqual([]);
    expect(unexpected()).toEqual([]);
    await expectCleanHistory(secondRun.saved, 4, 8);
  });

  /** Takes every server connection of the pool with other clients' open transactions, until the returned end(). */
  async function saturate(): Promise<() => Promise<void>> {
    const hogs = await Promise.all(
      Array.from({ length: POOL_SIZE }, async () => {
        const client = new pg.Client({ connectionString: pooledUrl });
        await client.connect();
        await client.query('BEGIN');
        await client.query('SELECT 1');
        return client;
      }),
    );
    return async () => {
      await Promise.all(
        hogs.map(async (client) => {
          await client.query('ROLLBACK');
          await client.end();
        }),
      );
    };
  }

  test('with sessionUrl, a lease survives a saturated pooler: heartbeats do not queue for its server connections', async () => {
    const holder = await instance('holder', { connections: { sessionUrl: db.url } });
    const lease = (await holder.service.tryAcquire('saturated'))!;
    const end = await saturate();
    try {
      await sleep(3 * TIMING.timing!.leaseTimeoutMs!);
      expect(lease.isHeld()).toBe(true);
      expect(holder.events.filter((event) => event.type === 'lost')).toEqual([]);
      expect(unexpected()).toEqual([]); // no renewal failed, but for a connect timeout under load
    } finally {
      await end();
    }
    await lease.fenced((manager) => write(manager, 'saturated', lease));
    await lease.release();
    expect(unexpected()).toEqual([]);
  });

  test('without sessionUrl, a saturated pooler costs the lease (the documented limit; the holder stops in time)', async () => {
    const holder = await instance('holder', {});
    const lease = (await holder.service.tryAcquire('saturated'))!;
    const end = await saturate();
    try {
      await eventually(() => lease.signal.aborted, Boolean, 'the lease is lost', 3 * TIMING.timing!.leaseTimeoutMs!);
      expect(holder.events.find((event) => event.type === 'lost')).toMatchObject({ reason: 'renewal-deadline' });
    } finally {
      await end();
    }
    await expect(lease.fenced(async () => undefined)).rejects.toThrow(/was lost/);
    await lease.release();
  });

  test('with sessionUrl, NOTIFY wakes a priority waiter within 500 ms of the release (poll set to 10 s)', async () => {
    const options = { connections: { sessionUrl: db.url }, timing: { waitPollIntervalMs: 10_000 } };
    const holder = await instance('holder', options);
    const low = await instance('low', options);
    const high = await instance('high', options);
    const lease = (await holder.service.tryAcquire('prio'))!;
    const lowWait = low.service.acquire('prio', { priority: 1, onBusy: { wait: { timeoutMs: 30_000 } } });
    await eventually(
      () => waiterRows(admin),
      (n) => n === 1,
      'low waiter queued',
    );
    const highWait = high.service
      .acquire('prio', { priority: 5, onBusy: { wait: { timeoutMs: 30_000 } } })
      .then((granted) => ({ granted, at: performance.now() }));
    await eventually(
      () => waiterRows(admin),
      (n) => n === 2,
      'high waiter queued',
    );
    await sleep(300); // both are asleep in their 10 s poll
    const released = performance.now();
    await lease.release();
    const { granted, at } = await highWait;
    const latency = at - released;
    console.log(`[pooler] priority waiter granted ${latency.toFixed(0)} ms after the release`);
    expect(latency).toBeLessThan(500);
    expect(granted.fencingToken).toBeGreaterThan(lease.fencingToken);
    const releasedAgain = performance.now();
    await granted.release();
    const next: Lease = await lowWait;
    expect(performance.now() - releasedAgain).toBeLessThan(500);
    await next.release();
    expect(unexpected()).toEqual([]);
  });

  test('without sessionUrl: a warning at bootstrap, notify off, a 1 s default poll that still grants waiters', async () => {
    const defaults = {
      timing: { heartbeatIntervalMs: 30_000, leaseTimeoutMs: 120_000, waitPollIntervalMs: undefined },
    };
    const plain = await instance('plain', defaults);
    expect(plain.service.options.connections.notify).toBe(false);
    expect(plain.service.options.timing.waitPollIntervalMs).toBe(1_000);
    expect(warnings.some((message) => BOOTSTRAP_WARNING.test(message))).toBe(true);
    warnings.length = 0;

    const holder = await instance('holder', {});
    const waiter = await instance('waiter', { timing: { waitPollIntervalMs: undefined } });
    const lease = (await holder.service.tryAcquire('poll'))!;
    const waiting = waiter.service
      .acquire('poll', { priority: 1, onBusy: { wait: { timeoutMs: 30_000 } } })
      .then((granted) => ({ granted, at: performance.now() }));
    await eventually(
      () => waiterRows(admin),
      (n) => n === 1,
      'waiter queued',
    );
    const released = performance.now();
    await lease.release();
    const { granted, at } = await waiting;
    console.log(
      `[pooler] without sessionUrl, waiter granted by its poll ${(at - released).toFixed(0)} ms after release`,
    );
    expect(at - released).toBeLessThan(3_000);
    await granted.release();
  });
});
