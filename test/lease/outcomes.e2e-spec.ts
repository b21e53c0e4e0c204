import {
  LeaseArgumentError,
  LeaseConfigError,
  leaseErrorToHttp,
  LeaseShutdownError,
  LeaseUnavailableError,
} from 'nest-pg-lease';
import type pg from 'pg';
import { adminClient, createTestDatabase, serverUrl, startService } from '../support/db.js';

/**
 * Every outcome of a call has a class: a database that refuses connections (here: `ALLOW_CONNECTIONS false` and the
 * pool's connections terminated — the real server, failing for real), a service shut down, and bad call-time input.
 */
describe('outcomes of a call', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let admin: pg.Client;
  let database: string;
  let name: string;

  beforeAll(async () => {
    db = await createTestDatabase('outcomes');
    // Connected to the server's maintenance database: a database cannot refuse the session that alters it.
    admin = await adminClient(serverUrl());
    name = decodeURIComponent(new URL(db.url).pathname.slice(1));
    database = `"${name.replace(/"/g, '""')}"`;
  });

  afterAll(async () => {
    await admin.end();
    await db.drop();
  });

  /** Refuses new connections to the test database and ends every existing one but the admin's. */
  const cutOff = async () => {
    await admin.query(`ALTER DATABASE ${database} ALLOW_CONNECTIONS false`);
    await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [name]);
  };
  const restore = () => admin.query(`ALTER DATABASE ${database} ALLOW_CONNECTIONS true`);

  test('a database refusing connections: tryAcquire, acquire, run and list reject with LeaseUnavailableError (the pg error as cause; 503 + Retry-After)', async () => {
    const a = await startService(db.url, { owner: 'outcomes-a' });
    try {
      await cutOff();
      const calls: Array<[string, () => Promise<unknown>]> = [
        ['tryAcquire', () => a.service.tryAcquire('outcome:1')],
        ['run', () => a.service.run('outcome:1', () => 1)],
        // A wait long enough that its deadline never races the refusal (a wait of 0 ms ended as a wait timeout when
        // the refused connection took longer than the grace on a loaded machine): the database's error ends it at once.
        ['acquire', () => a.service.acquire('outcome:1', { onBusy: { wait: { timeoutMs: 10_000 } } })],
        ['list', () => a.service.list()],
      ];
      for (const [name, call] of calls) {
        const error = await call().then(
          () => new Error(`${name} resolved`),
          (e: unknown) => e,
        );
        expect([name, error]).toEqual([name, expect.any(LeaseUnavailableError)]);
        const cause = (error as LeaseUnavailableError).cause as { code?: string } | undefined;
        expect(cause).toBeInstanceOf(Error);
        expect((error as Error).message).toMatch(/unreachable or failing/);
        const headers: Record<string, string> = {};
        const http = leaseErrorToHttp(error, { setHeader: (n: string, v: string) => (headers[n] = v) }) as {
          getStatus(): number;
        };
        expect(http.getStatus()).toBe(503);
        expect(headers['Retry-After']).toBe('1');
      }
      await restore();
      // Transient: once the database answers again, so does the service.
      const lease = await a.service.tryAcquire('outcome:1');
      expect(lease).not.toBeNull();
      await lease!.release();
    } finally {
      await restore();
      await a.close();
    }
  });

  test('after close(): tryAcquire, acquire and run reject with LeaseShutdownError (503)', async () => {
    const a = await startService(db.url, { owner: 'outcomes-b' });
    await a.close();
    await expect(a.service.tryAcquire('outcome:2')).rejects.toBeInstanceOf(LeaseShutdownError);
    await expect(a.service.acquire('outcome:2', { priority: 1 })).rejects.toBeInstanceOf(LeaseShutdownError);
    await expect(a.service.run('outcome:2', () => 1)).rejects.toBeInstanceOf(LeaseShutdownError);
    const http = leaseErrorToHttp(new LeaseShutdownError('outcome:2')) as { getStatus(): number };
    expect(http.getStatus()).toBe(503);
  });

  test.each([-1, 1.5, 2 ** 31, Number.NaN])(
    'waitTimeoutMs %p at call time → LeaseArgumentError (400), not the bootstrap LeaseConfigError',
    async (waitTimeoutMs) => {
      const a = await startService(db.url, { owner: 'outcomes-c' });
      try {
        for (const call of [
          () => a.service.acquire('outcome:3', { onBusy: { wait: { timeoutMs: waitTimeoutMs } } }),
          () => a.service.run('outcome:3', () => 1, { onBusy: { wait: { timeoutMs: waitTimeoutMs } } }),
        ]) {
          const error = await call().catch((e: unknown) => e);
          expect(error).toBeInstanceOf(LeaseArgumentError);
          expect(error).not.toBeInstanceOf(LeaseConfigError);
          expect((leaseErrorToHttp(error) as { getStatus(): number }).getStatus()).toBe(400);
        }
      } finally {
        await a.close();
      }
    },
  );

  test('an already aborted signal: run, acquire and @Exclusive-style entry reject with its reason and touch no row', async () => {
    const a = await startService(db.url, { owner: 'outcomes-d' });
    try {
      const controller = new AbortController();
      controller.abort(new Error('the caller is gone'));
      const { signal } = controller;
      let ran = false;
      const work = () => {
        ran = true;
        return 1;
      };
      await expect(a.service.run('outcome:aborted', work, { signal })).rejects.toThrow('the caller is gone');
      await expect(a.service.run('outcome:aborted', work, { signal, priority: 1, onBusy: 'wait' })).rejects.toThrow(
        'the caller is gone',
      );
      await expect(a.service.acquire('outcome:aborted', { signal })).rejects.toThrow('the caller is gone');
      expect(ran).toBe(false);
      const probe = await adminClient(db.url);
      try {
        const { rows } = await probe.query('SELECT 1 FROM job_lease WHERE target_id = $1', ['outcome:aborted']);
        expect(rows).toEqual([]);
      } finally {
        await probe.end();
      }
    } finally {
      await a.close();
    }
  });
});
