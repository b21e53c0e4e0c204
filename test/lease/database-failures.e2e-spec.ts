/**
 * Every entry point's database failure is a `LeaseError` (issue 38 item 10), connecting included: with the database
 * refusing connections, a call that needs a fresh pooled connection got the driver's `Error: connect ECONNREFUSED`
 * (an HTTP 500). The refusal is aimed, not hoped for: the service reaches PostgreSQL through a TCP proxy whose
 * listener is closed (`down()`: its established connections are dropped too, so every statement needs a new one, and
 * nothing listens on the port). Each call's class is the one docs/errors-and-http.md gives; its `cause` is the driver's
 * ECONNREFUSED, which proves it took the connecting path.
 */
import { Controller, type INestApplication, Logger, ConsoleLogger, Param, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Exclusive, LeaseError, LeaseModule, LeaseWaitTimeoutError, leaseEntities } from 'nest-pg-lease';
import { joinersWaiting, mergeLeaseOptions } from '../../libs/lease/src/internal.js';
import { eventually, FAST, startService, useTestDatabase } from '../support/db.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { post, startApp } from '../exclusive/fixtures.js';

const db = useTestDatabase('db_failures', 'read committed', (admin) =>
  // The server fails a preemption request on the keys of one test (as a server going down mid-statement would).
  admin.query(`CREATE FUNCTION refuse_preemption() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.preempt_of IS DISTINCT FROM OLD.preempt_of AND NEW.target_id LIKE 'refused:preempt%' THEN
        RAISE EXCEPTION 'the server is going down' USING ERRCODE = 'admin_shutdown';
      END IF;
      RETURN NEW;
    END $$`),
);
const proxies: TcpProxy[] = [];
db.beforeDrop(() => Promise.all(proxies.map((proxy) => proxy.stop())));

/** A proxy in front of the test database, stopped after the file. */
async function proxied(): Promise<{ proxy: TcpProxy; url: string }> {
  const made = await TcpProxy.inFrontOf(db.url);
  proxies.push(made.proxy);
  return made;
}

const refusing = new WeakSet<TcpProxy>();

/**
 * Nothing listens on the proxy's port any more, and the connections it carried are gone: the client side of each has
 * seen its end once a poll phase of the event loop ran after the proxy destroyed them (a timer, then an immediate).
 */
async function refuseConnections(proxy: TcpProxy): Promise<void> {
  refusing.add(proxy);
  await proxy.down();
  await new Promise((resolve) => setTimeout(resolve, 50));
  await new Promise((resolve) => setImmediate(resolve));
}

/** The proxy listens again (once; a no-op when it was not refusing). */
async function acceptConnections(proxy: TcpProxy): Promise<void> {
  if (!refusing.delete(proxy)) return;
  await proxy.up();
}

/** What `promise` rejected with (it must reject). */
async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    (value) => {
      throw new Error(`expected a rejection, got ${String(value)}`);
    },
    (error: unknown) => error,
  );
}

/**
 * `error` is a `LeaseUnavailableError` whose cause is the refused connection: one of `causes`, each a socket error's
 * code or, for `pg`'s own errors that carry none, their message.
 */
function expectRefused(error: unknown, what: string, causes: readonly string[] = ['ECONNREFUSED']): void {
  const seen = `${what}: ${String(error)}`;
  expect({ what, leaseError: error instanceof LeaseError, seen }).toEqual({ what, leaseError: true, seen });
  expect({ what, name: (error as Error).name }).toEqual({ what, name: 'LeaseUnavailableError' });
  const failure = (error as Error).cause as { code?: string; message?: string } | undefined;
  const cause = failure?.code ?? failure?.message;
  expect({ what, cause, expected: causes.includes(cause ?? '') }).toEqual({ what, cause, expected: true });
}

/**
 * The timings of the service under test: the statements of its warm-up must answer on a loaded machine (with the
 * test timings, a `list()` is bounded by a heartbeat interval of 100 ms), and its lease must outlive the refusal's
 * first calls by the local clock.
 */
const ROOMY = { timing: { heartbeatIntervalMs: 1_000, leaseTimeoutMs: 10_000, waiterTimeoutMs: 3_000 } };

describe('the database refusing connections', () => {
  test('every call of the service rejects with its LeaseError; a release is quiet; a wait in line times out', async () => {
    const { proxy, url } = await proxied();
    const other = await db.open({}, 'lease-test-other');
    // The service under test reaches the database through the proxy only.
    const { service, close } = await startService(url, ROOMY);
    const warnings: string[] = [];
    const quiet = () => undefined;
    Logger.overrideLogger({ log: quiet, error: quiet, warn: (message: unknown) => warnings.push(String(message)) });
    try {
      const held = (await service.tryAcquire('refused:held'))!;
      expect(held).not.toBeNull();
      // Calls already waiting when the database goes keep waiting (their statements fail), then time out: one queued
      // by its first attempt (its later attempts fail), and a semaphore's, which queues after its first attempt — its
      // enqueue is held back meanwhile, behind the process's LISTEN connection, which stalls until the refusal.
      const busy = (await other.service.tryAcquire('refused:busy'))!;
      const slots = [
        (await other.service.tryAcquire('refused:full', { limit: 2 }))!,
        (await other.service.tryAcquire('refused:full', { limit: 2 }))!,
      ];
      const waiting = new Set<string>();
      const seen = service.events$.subscribe((event) => event.type === 'waiting' && waiting.add(event.targetKey));
      const refused = (key: string) => eventually(() => waiting.has(key), Boolean, `${key}: first attempt refused`);
      // Idle pooled connections for the first attempts (a few statements at once), before new ones stall.
      await Promise.all([service.list('refused:busy'), service.list('refused:full'), service.list()]);
      proxy.stallNewConnections();
      const inLine = rejectionOf(service.acquire('refused:busy', { onBusy: { wait: { timeoutMs: 1_500 } } }));
      await refused('refused:busy');
      const enqueuing = rejectionOf(
        service.acquire('refused:full', { limit: 2, onBusy: { wait: { timeoutMs: 1_500 } } }),
      );
      await refused('refused:full');
      seen.unsubscribe();
      expect(proxy.stalledConnections).toBeGreaterThanOrEqual(1);
      await refuseConnections(proxy);

      // fenced() first: the lease is still held by the local clock (its renewals now fail).
      expectRefused(await rejectionOf(held.fenced((manager) => manager.query('SELECT 1'))), 'fenced()');
      expectRefused(await rejectionOf(service.tryAcquire('refused:a')), 'tryAcquire');
      expectRefused(await rejectionOf(service.tryAcquire('refused:slots', { limit: 3 })), 'tryAcquire, a slot');
      expectRefused(
        await rejectionOf(service.acquire('refused:b', { onBusy: { wait: { timeoutMs: 1_000 } } })),
        'acquire',
      );
      expectRefused(
        await rejectionOf(service.acquire('refused:slots', { limit: 3, onBusy: { wait: { timeoutMs: 1_000 } } })),
        'acquire, a slot',
      );
      expectRefused(
        await rejectionOf(service.acquire('refused:c', { priority: 5, onBusy: { preempt: { waitTimeoutMs: 1_000 } } })),
        'acquire, preempting',
      );
      expectRefused(await rejectionOf(service.run('refused:d', () => 'ran')), 'run');
      expectRefused(await rejectionOf(service.run('refused:e', () => 'ran', { onBusy: 'join' })), 'run, join');
      expectRefused(await rejectionOf(service.list()), 'list()');
      expectRefused(await rejectionOf(service.list('refused:a')), 'list(key)');

      // A candidate never rejects: its failed attempt is logged as the library's error, and it stays in line.
      const leadership = service.elect('refused:leader');
      await eventually(
        () => warnings.filter((line) => line.includes('Candidate for "refused:leader"')),
        (lines) => lines.length > 0,
        'the candidate’s failed attempt logged',
        5_000,
      );
      const candidate = warnings.find((line) => line.includes('Candidate for "refused:leader"'))!;
      expect(candidate).toMatch(/LeaseUnavailableError/);
      expect(leadership.isLeader).toBe(false);
      await leadership.stop();

      // A release never throws: it is retried until it lands.
      await expect(held.release()).resolves.toBeUndefined();

      for (const [what, wait] of [
        ['attempts in line', inLine],
        ['an enqueue', enqueuing],
      ] as const) {
        const waited = await wait;
        expect({ what, timedOut: waited instanceof LeaseWaitTimeoutError }).toEqual({ what, timedOut: true });
        // Why the wait did not get the lease: the database, as the library's error.
        expectRefused((waited as Error).cause, `${what}: the cause`);
      }

      await acceptConnections(proxy);
      await Promise.all([busy, ...slots].map((lease) => lease.release()));
    } finally {
      Logger.overrideLogger(new ConsoleLogger());
      await acceptConnections(proxy);
      await close();
    }
  });

  test('a join waiting for another process’s run: LeaseUnavailableError when the database refuses', async () => {
    const { proxy, url } = await proxied();
    const holder = await db.open({}, 'lease-test-holder');
    // A long poll: after its first look, the joiner reads again only 2.5 to 5 s later (no NOTIFY comes meanwhile).
    const { service, close } = await startService(
      url,
      mergeLeaseOptions(ROOMY, { timing: { waitPollIntervalMs: 5_000 } }),
      'lease-test-joiner',
    );
    let finish!: () => void;
    const running = holder.service.run(
      'refused:joined',
      () => new Promise<string>((resolve) => (finish = () => resolve('done'))),
      {
        onBusy: 'join',
      },
    );
    try {
      await eventually(
        async () => (await holder.service.list('refused:joined')).length,
        (n) => n === 1,
        'the run holding the key',
        5_000,
      );
      const joined = rejectionOf(
        service.run('refused:joined', () => 'ran twice', { onBusy: { join: { timeoutMs: 15_000 } } }),
      );
      await eventually(
        () => joinersWaiting(service, 'refused:joined'),
        (n) => n === 1,
        'the joiner waiting for the other process’s outcome',
        5_000,
      );
      // Its first look is over (no statement of it in flight when the proxy goes): its next read needs a connection.
      await eventually(
        async () => {
          const { rows } = await db.admin.query<{ idle: boolean; read: boolean }>(
            `SELECT state = 'idle' AS idle, query LIKE '%job_lease_result%' AS read FROM pg_stat_activity
             WHERE application_name = 'lease-test-joiner:statements'`,
          );
          return rows;
        },
        (rows) => rows.some((row) => row.read) && rows.every((row) => row.idle),
        'the joiner’s first read answered',
        5_000,
      );
      await refuseConnections(proxy);
      // Its next read may be the one that finds its pooled connection gone rather than a new one refused, when the
      // client has not yet seen the proxy end it (a loaded machine): reset by the peer, or ended while the read was
      // sent or found broken (`pg`'s own errors, no code; a reset and one of these each seen once in full runs). Either way the
      // database is the cause, and the class is the one docs/errors-and-http.md gives.
      expectRefused(await joined, 'a join of another process’s run', [
        'ECONNREFUSED',
        'ECONNRESET',
        'Connection terminated unexpectedly',
        'Client has encountered a connection error and is not queryable',
      ]);
    } finally {
      finish();
      await running;
      await acceptConnections(proxy);
      await close();
    }
  });

  test('@Exclusive over HTTP answers 503 + Retry-After, not 500', async () => {
    const { proxy, url } = await proxied();

    @Controller()
    class RefusedController {
      @Post('refused/:id')
      @Exclusive('refused:http:{id}')
      build(@Param('id') id: string) {
        return { id };
      }
    }

    let app: INestApplication | undefined;
    try {
      const started = await startApp(
        [
          TypeOrmModule.forRoot({ type: 'postgres', url, entities: [...leaseEntities] }),
          LeaseModule.forRoot(mergeLeaseOptions(FAST, { tables: { createSchema: true } })),
        ],
        [RefusedController],
      );
      app = started.app;
      expect((await post(`${started.url}/refused/1`)).status).toBe(201);
      await refuseConnections(proxy);
      const answer = await post(`${started.url}/refused/2`);
      expect({ status: answer.status, retryAfter: answer.retryAfter !== null }).toEqual({
        status: 503,
        retryAfter: true,
      });
    } finally {
      await acceptConnections(proxy);
      await app?.close();
    }
  });

  test('a preempting call whose request to the holder fails: LeaseUnavailableError', async () => {
    const holder = await db.open({}, 'lease-test-holder');
    const caller = await db.open({}, 'lease-test-caller');
    await db.admin.query(`CREATE TRIGGER refuse_preemption BEFORE UPDATE ON job_lease
      FOR EACH ROW EXECUTE FUNCTION refuse_preemption()`);
    const held = (await holder.service.tryAcquire('refused:preempt'))!;
    try {
      // Its first attempt is refused (the key is held), then its request to the holder fails in the server.
      const error = await rejectionOf(
        caller.service.acquire('refused:preempt', { priority: 5, onBusy: { preempt: { waitTimeoutMs: 2_000 } } }),
      );
      expect({ name: (error as Error).name, leaseError: error instanceof LeaseError }).toEqual({
        name: 'LeaseUnavailableError',
        leaseError: true,
      });
      expect(((error as Error).cause as { code?: string }).code).toBe('57P01');
      expect(held.isHeld()).toBe(true);
    } finally {
      await held.release();
    }
  });
});
