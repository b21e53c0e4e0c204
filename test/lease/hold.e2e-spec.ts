import { LeaseArgumentError, type LeaseEvent } from 'nest-pg-lease';
import { eventually, type OpenedService, useTestDatabase } from '../support/db.js';

/**
 * holdAtLeastMs (ShedLock's lockAtLeastFor): after release, the target stays taken until holdAtLeastMs after the
 * acquisition (database clock), with no heartbeat for that tail — so a job that finishes in milliseconds is not run
 * again by an instance whose timer fires a few milliseconds later.
 */
describe('holdAtLeastMs', () => {
  const db = useTestDatabase('hold');
  let a: OpenedService;
  let b: OpenedService;

  beforeAll(async () => {
    a = await db.open({ owner: 'a' });
    b = await db.open({ owner: 'b', timing: { waitPollIntervalMs: 10_000, waiterTimeoutMs: 30_000 } });
  });

  const acquiredAt = async (key: string) =>
    (await db.admin.query<{ at: string }>(`SELECT acquired_at::text AS at FROM job_lease WHERE target_id = $1`, [key]))
      .rows[0].at;
  /** Milliseconds between two acquired_at values, by the database's arithmetic. */
  const between = async (from: string, to: string) =>
    Number(
      (await db.admin.query(`SELECT extract(epoch FROM $2::timestamptz - $1::timestamptz) * 1000 AS ms`, [from, to]))
        .rows[0].ms,
    );

  test('tryAcquire: released at once, the target stays taken for holdAtLeastMs, with no heartbeat', async () => {
    const key = 'hold:try';
    const events: LeaseEvent[] = [];
    const sub = a.service.events$.subscribe((event) => events.push(event));
    const lease = (await a.service.tryAcquire(key, { holdAtLeastMs: 1_500 }))!;
    const first = await acquiredAt(key);
    await lease.release();
    const releasedAt = events.length;
    expect(a.service.heldLeases()).toEqual([]);
    expect(await b.service.tryAcquire(key)).toBeNull();
    expect(await b.service.tryAcquire(key, { holdAtLeastMs: 1_500 })).toBeNull();
    const next = await eventually(
      () => b.service.tryAcquire(key),
      (got) => got !== null,
      'the hold to end',
      10_000,
      50,
    );
    const second = await acquiredAt(key);
    sub.unsubscribe();
    expect(await between(first, second)).toBeGreaterThanOrEqual(1_500);
    // No renewal of the released lease during its tail.
    expect(events.slice(releasedAt).filter((event) => event.type === 'renewed')).toEqual([]);
    await next!.release();
    // Without holdAtLeastMs a release frees the target at once.
    expect(await a.service.tryAcquire(key)).not.toBeNull();
  });

  test('run: work longer than the hold frees the target at release; short work holds it for the rest', async () => {
    await a.service.run('hold:run-long', async () => new Promise((resolve) => setTimeout(resolve, 400)), {
      holdAtLeastMs: 200,
    });
    const free = await b.service.tryAcquire('hold:run-long');
    expect(free).not.toBeNull();
    await free!.release();

    await a.service.run('hold:run-short', async () => 'done', { holdAtLeastMs: 1_000 });
    const first = await acquiredAt('hold:run-short');
    expect(await b.service.tryAcquire('hold:run-short')).toBeNull();
    const next = await eventually(
      () => b.service.tryAcquire('hold:run-short'),
      (got) => got !== null,
      'the hold to end',
      10_000,
      50,
    );
    expect(await between(first, await acquiredAt('hold:run-short'))).toBeGreaterThanOrEqual(1_000);
    await next!.release();
  });

  test('a waiter is granted as the hold ends, without waiting for its poll', async () => {
    const key = 'hold:wait';
    const lease = (await a.service.tryAcquire(key, { holdAtLeastMs: 1_500 }))!;
    const first = await acquiredAt(key);
    // b polls every 5–10 s: only the hold's end, learnt from its own refused attempts, can wake it sooner.
    const waiting = b.service.acquire(key, { onBusy: { wait: { timeoutMs: 20_000 } } });
    await eventually(
      () => db.admin.query('SELECT 1 FROM job_lease_waiter WHERE target_id = $1', [key]),
      (r) => r.rowCount === 1,
      'b queued',
    );
    await lease.release();
    const granted = await waiting;
    const gap = (await between(first, await acquiredAt(key))) - 1_500;
    console.log(`waiter granted ${gap.toFixed(0)} ms after the hold ended (poll 5–10 s)`);
    expect(gap).toBeGreaterThanOrEqual(0);
    expect(gap).toBeLessThan(1_500);
    await granted.release();
  });

  test('acquire and run in line pass holdAtLeastMs on to the lease they get', async () => {
    const key = 'hold:acquire';
    const lease = await b.service.acquire(key, { onBusy: { wait: { timeoutMs: 5_000 } }, holdAtLeastMs: 1_000 });
    await lease.release();
    expect(await a.service.tryAcquire(key)).toBeNull();
    const got = await a.service.run(key, async (held) => held.fencingToken, {
      onBusy: { wait: { timeoutMs: 5_000 } },
      holdAtLeastMs: 1_000,
    });
    expect(got).toBeGreaterThan(lease.fencingToken);
    expect(await b.service.tryAcquire(key)).toBeNull();
  });

  test.each([-1, 1.5, Number.NaN, '100', 2 ** 31])(
    'holdAtLeastMs %p → LeaseArgumentError, nothing written',
    async (bad) => {
      const holdAtLeastMs = bad as number;
      await expect(a.service.tryAcquire('hold:bad', { holdAtLeastMs })).rejects.toBeInstanceOf(LeaseArgumentError);
      await expect(a.service.acquire('hold:bad', { holdAtLeastMs })).rejects.toThrow(/holdAtLeastMs must be/);
      await expect(a.service.run('hold:bad', async () => 1, { holdAtLeastMs })).rejects.toBeInstanceOf(
        LeaseArgumentError,
      );
      expect((await db.admin.query(`SELECT 1 FROM job_lease WHERE target_id = 'hold:bad'`)).rowCount).toBe(0);
    },
  );
});
