import {
  LeaseArgumentError,
  LeaseKeyError,
  LeaseBusyError,
  LeaseConfigError,
  LeaseLostError,
  LeaseService,
} from 'nest-pg-lease';
import pg from 'pg';
import { ownRow, resolveLeaseOptions, LeaseStore } from '../../libs/lease/src/internal.js';
import { FAST, ISOLATIONS, makeDataSource, type OpenedService, useTestDatabase } from '../support/db.js';

/**
 * Acquisition and release: one holder per key, fresh tokens, bad input refused before any SQL — under the server's
 * default isolation and under `default_transaction_isolation = serializable`.
 */
describe.each(ISOLATIONS)('acquire and release (default_transaction_isolation = %s)', (isolation) => {
  const db = useTestDatabase('acquire', isolation);
  let a: OpenedService;
  let b: OpenedService;

  beforeAll(async () => {
    // Leases of 10 s: the burst of 3,200 first acquisitions below must not outlast a lease on a loaded machine (an
    // expired lease is rightly taken over, which would count as a second winner).
    const slow = { timing: { heartbeatIntervalMs: 500, leaseTimeoutMs: 10_000 } };
    a = await db.open({ ...slow, owner: 'process-a' });
    b = await db.open({ ...slow, owner: 'process-b' });
  });

  /** Held leases (a released row stays, with no lease token), or waiter rows. */
  const rowCount = async (table = 'job_lease') => {
    const held = table === 'job_lease' ? ' WHERE lease_token IS NOT NULL' : '';
    return Number((await db.admin.query(`SELECT count(*) FROM ${table}${held}`)).rows[0].count);
  };

  test('two tryAcquire on one key: one lease, one null; after release acquirable again with a larger fencing token', async () => {
    const first = await a.service.tryAcquire('report:user:1');
    const second = await b.service.tryAcquire('report:user:1');
    expect(first).not.toBeNull();
    expect(second).toBeNull();
    expect(first!.isHeld()).toBe(true);
    const row = (
      await db.admin.query('SELECT lease_token::text, fencing_token::text, owner FROM job_lease WHERE target_id = $1', [
        'report:user:1',
      ])
    ).rows[0];
    expect(row).toEqual({
      lease_token: first!.token,
      fencing_token: first!.fencingToken.toString(),
      owner: 'process-a',
    });

    await first!.release();
    expect(first!.isHeld()).toBe(false);
    expect(first!.signal.aborted).toBe(true);
    await first!.release(); // idempotent

    const third = await b.service.tryAcquire('report:user:1');
    expect(third).not.toBeNull();
    expect(third!.token).not.toBe(first!.token);
    expect(third!.fencingToken).toBeGreaterThan(first!.fencingToken);
    await third!.release();
    expect(await rowCount()).toBe(0);
  });

  test('a released row stays, dead for its old token: no renewal, release or fence; no holder in list()', async () => {
    const lease = (await a.service.tryAcquire('soft:1'))!;
    await lease.release();
    const row = (
      await db.admin.query(`SELECT lease_token, fencing_token::text FROM job_lease WHERE target_id = 'soft:1'`)
    ).rows;
    expect(row).toEqual([{ lease_token: null, fencing_token: lease.fencingToken.toString() }]);
    expect((await a.service.list('soft:1')).filter((snapshot) => snapshot.state === 'held')).toEqual([]);
    // The library's own statements with the old token, as a late retry would send them.
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const store = new LeaseStore(pool, pool, resolveLeaseOptions(FAST));
      const none = { kept: new Set(), skipped: new Set(), expired: new Set(), forced: new Set(), preempted: new Set() };
      expect(await store.renew([ownRow('soft:1')], [lease.token], 5_000)).toEqual(none);
      expect(await store.release(ownRow('soft:1'), lease.token, 5_000)).toBe(false);
    } finally {
      await pool.end();
    }
    await expect(lease.fenced(async () => 'never')).rejects.toBeInstanceOf(LeaseLostError);
    const next = (await b.service.tryAcquire('soft:1'))!;
    expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
    const events: string[] = [];
    const sub = b.service.events$.subscribe((event) => events.push(event.type));
    await next.release();
    const again = (await b.service.tryAcquire('soft:1'))!;
    sub.unsubscribe();
    // Acquiring a released row is an acquisition, not a takeover (and the call's end says so: acquire-ended).
    expect(events).toEqual(['released', 'acquired', 'acquire-ended']);
    await again.release();
    expect(await rowCount()).toBe(0);
  });

  test('16 concurrent first acquires on each of 200 fresh keys: exactly one winner per key, no errors', async () => {
    const keys = Array.from({ length: 200 }, (_, i) => `fresh:${i}`);
    const contenders = [a.service, b.service];
    const attempts = keys.flatMap((key) =>
      Array.from({ length: 16 }, (_, i) => contenders[i % 2].tryAcquire(key).then((lease) => ({ key, lease }))),
    );
    const results = await Promise.all(attempts); // any unique violation would reject here
    const winners = new Map<string, number>();
    for (const { key, lease } of results) if (lease) winners.set(key, (winners.get(key) ?? 0) + 1);
    expect(winners.size).toBe(200);
    expect([...winners.values()].every((count) => count === 1)).toBe(true);
    const tokens = new Set(results.flatMap(({ lease }) => (lease ? [lease.fencingToken] : [])));
    expect(tokens.size).toBe(200);
    expect(await rowCount()).toBe(200);
    await Promise.all(results.flatMap(({ lease }) => (lease ? [lease.release()] : [])));
    expect(await rowCount()).toBe(0);
  });

  test('run: acquires, exposes the lease as current(), releases in finally, refuses a busy target', async () => {
    let seen: unknown;
    const result = await a.service.run('job:run', async (lease) => {
      seen = a.service.current();
      await expect(b.service.run('job:run', async () => 'never')).rejects.toBeInstanceOf(LeaseBusyError);
      expect(await rowCount()).toBe(1);
      return lease.fencingToken;
    });
    expect(typeof result).toBe('bigint');
    expect((seen as { fencingToken: bigint }).fencingToken).toBe(result);
    expect(a.service.current()).toBeUndefined();
    expect(await rowCount()).toBe(0);

    await expect(
      a.service.run('job:run', async () => {
        throw new Error('work failed');
      }),
    ).rejects.toThrow('work failed');
    expect(await rowCount()).toBe(0);
  });

  test('run is reentrant in one call chain: the nested call reuses the held lease and does not release it', async () => {
    await a.service.run('job:nested', async (outer) => {
      const inner = await a.service.run('job:nested', async (lease) => {
        expect(lease.token).toBe(outer.token);
        await lease.release(); // a borrowed lease: leaves the outer one alone
        return lease.fencingToken;
      });
      expect(inner).toBe(outer.fencingToken);
      expect(outer.isHeld()).toBe(true);
      const borrowed = await a.service.tryAcquire('job:nested');
      expect(borrowed?.token).toBe(outer.token);
      expect(await rowCount()).toBe(1);
    });
    expect(await rowCount()).toBe(0);
  });

  test('another call chain in the same process does not share the lease: it asks the database and is refused', async () => {
    const held = await a.service.tryAcquire('job:chain');
    expect(await a.service.tryAcquire('job:chain')).toBeNull();
    await held!.release();
  });

  test.each([
    ['empty', ''],
    ['too long', 'k'.repeat(256)],
    ['too long in bytes', 'é'.repeat(128)],
    ['NUL', 'a\0b'],
    ['a lone high surrogate', 'report:\uD83D'],
    ['a lone low surrogate', '\uDE00:report'],
    ['not a string', 42],
    ['undefined', undefined],
  ])('bad key (%s) → LeaseKeyError, nothing written', async (_, key) => {
    await expect(a.service.tryAcquire(key as string)).rejects.toBeInstanceOf(LeaseKeyError);
    await expect(a.service.acquire(key as string, { priority: 1 })).rejects.toBeInstanceOf(LeaseKeyError);
    await expect(a.service.run(key as string, async () => 1)).rejects.toBeInstanceOf(LeaseKeyError);
    expect(await rowCount()).toBe(0);
    expect(await rowCount('job_lease_waiter')).toBe(0);
  });

  test('a key of exactly 255 bytes is accepted', async () => {
    const lease = await a.service.tryAcquire('é'.repeat(127) + 'k');
    expect(lease).not.toBeNull();
    await lease!.release();
  });

  test('bad priority → LeaseArgumentError (400; not a key error), nothing written', async () => {
    for (const priority of [1.5, 2 ** 31]) {
      const error = await a.service.tryAcquire('p', { priority }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LeaseArgumentError);
      expect(error).not.toBeInstanceOf(LeaseKeyError);
    }
    expect(await rowCount()).toBe(0);
  });

  test.each([
    [{ timing: { heartbeatIntervalMs: 500, leaseTimeoutMs: 1000 } }, /at least 3 × heartbeatIntervalMs/],
    [{ timing: { heartbeatIntervalMs: 0 } }, /heartbeatIntervalMs must be a positive integer/],
    [{ timing: { leaseTimeoutMs: 1.5 } }, /leaseTimeoutMs must be a positive integer/],
    [{ timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 300, safetyMarginMs: 250 } }, /safetyMarginMs/],
    [{ tables: { tableName: 'x'.repeat(60) } }, /tableName .* bytes/],
    [{ tables: { schema: '' } }, /schema must be a non-empty string/],
    [{ tables: { tableName: 'same', waiterTableName: 'same' } }, /must differ/],
    [
      { timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000, fencedIdleTimeoutMs: 1_701 } },
      /fencedIdleTimeoutMs \(1701\) must be at most .* \(1700\)/,
    ],
    [{ owner: 'host\0:1' }, /owner must not contain NUL/],
    [{ owner: 42 as unknown as string }, /owner must be a non-empty string/],
    [
      { tables: { tableName: 'jl', waiterTableName: 'jl_fencing_seq' } },
      /waiterTableName "jl_fencing_seq" collides with the fencing sequence of tableName "jl"/,
    ],
    [
      { tables: { tableName: 'jobs_seq', waiterTableName: 'jobs' } },
      /tableName "jobs_seq" collides with the waiter sequence of waiterTableName "jobs"/,
    ],
    [{ tables: { tableName: 'w_order_idx', waiterTableName: 'w' } }, /collides/],
    [{ tables: { tableName: 'w_pkey', waiterTableName: 'w' } }, /collides/],
  ])('bad options %p → LeaseConfigError with advice', (options, message) => {
    const dataSource = makeDataSource(db.url);
    expect(() => new LeaseService(dataSource, options)).toThrow(LeaseConfigError);
    expect(() => new LeaseService(dataSource, options)).toThrow(message);
  });

  test('missing tables → LeaseConfigError naming leaseMigrations; createSchema creates them in a custom schema', async () => {
    const dataSource = makeDataSource(db.url);
    await dataSource.initialize();
    try {
      const names = { schema: 'leases_x', tableName: 'my_lease', waiterTableName: 'my_waiter' };
      await expect(new LeaseService(dataSource, { tables: names }).init()).rejects.toThrow(/leaseMigrations/);
      const service = new LeaseService(dataSource, { tables: { ...names, createSchema: true } });
      await service.init();
      const lease = await service.tryAcquire('custom');
      expect((await db.admin.query('SELECT count(*) FROM leases_x.my_lease')).rows[0].count).toBe('1');
      await lease!.release();
      await service.close();
    } finally {
      await dataSource.destroy();
    }
  });
});
