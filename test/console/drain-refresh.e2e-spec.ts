import { LeaseDrainedError, LeaseOperator, LeaseShutdownError } from 'nest-pg-lease';
import pg from 'pg';
import { adminClient, eventually, useTestDatabase } from '../support/db.js';
import { sleep } from '../support/sleep.js';
import { DRAIN_REFRESH_MS } from '../../libs/lease/src/internal.js';

// What the drains cost a process, and how fresh its view of them is (docs/console.md, "Cost and bound"): a process
// reads the drain table while it attempts acquisitions (about once a second, never once per attempt), reads nothing
// while it attempts none — holding leases, renewing them, or idle —, and reads the drains before its first attempt
// after such a quiet spell, so a drain made meanwhile in another process is never missed.

/**
 * The drain reads sent while `body` runs by the service opened as `name` (any of its pg clients: its application name
 * starts with it), the other services of this file left out.
 */
async function countDrainReads<T>(name: string, body: (reads: () => number) => Promise<T>): Promise<T> {
  const original = pg.Client.prototype.query;
  let reads = 0;
  pg.Client.prototype.query = function (this: pg.Client, config: unknown, ...rest: unknown[]) {
    const text = typeof config === 'string' ? config : (config as { text?: string })?.text;
    const client = this as unknown as { connectionParameters?: { application_name?: string } };
    const ours = client.connectionParameters?.application_name?.startsWith(name) === true;
    if (ours && text && /^SELECT kind, subject, actor, reason, at FROM .*_drain"/.test(text)) reads++;
    return (original as (...args: unknown[]) => unknown).call(this, config, ...rest);
  } as typeof original;
  try {
    return await body(() => reads);
  } finally {
    pg.Client.prototype.query = original;
  }
}

const REFRESH_MS = DRAIN_REFRESH_MS;

describe('the drain view of a process', () => {
  const db = useTestDatabase('drain-refresh');

  test('a process that attempts nothing reads no drains, even while it renews the leases it holds', async () => {
    const a = await db.open({ timing: { heartbeatIntervalMs: 200, leaseTimeoutMs: 6_000 } }, 'quiet');
    const held = await Promise.all([1, 2, 3].map((i) => a.service.tryAcquire(`quiet:${i}`)));
    expect(held.every(Boolean)).toBe(true);
    // The attempts above keep the view fresh for one more refresh at most; then the process is quiet.
    await sleep(2 * REFRESH_MS);
    const reads = await countDrainReads('quiet', async (reads) => {
      await sleep(2 * REFRESH_MS);
      return reads();
    });
    // Before: one read a second whatever the process did (2 here).
    expect(reads).toBe(0);
    expect(held.every((lease) => !lease!.signal.aborted)).toBe(true);
    await Promise.all(held.map((lease) => lease!.release()));
  });

  test('the first attempt after a quiet spell sees a drain made meanwhile in another process, at once', async () => {
    const a = await db.open({}, 'drainer');
    const b = await db.open({}, 'resumer');
    await sleep(2 * REFRESH_MS);
    await new LeaseOperator(a.service).drain('quiet:drained', { by: 'ops', reason: 'maintenance' });
    // Before: b's view was up to a second old, and this attempt was granted.
    const reads = await countDrainReads('resumer', async (reads) => {
      await expect(b.service.tryAcquire('quiet:drained')).rejects.toBeInstanceOf(LeaseDrainedError);
      return reads();
    });
    expect(reads).toBe(1);
    await new LeaseOperator(a.service).undrain('quiet:drained', { by: 'ops', reason: 'done' });
  });

  test('a join after a quiet spell is refused by a drain made meanwhile, not joined to the run in progress', async () => {
    const a = await db.open({}, 'join-drainer');
    const b = await db.open({}, 'joiner');
    let finish!: () => void;
    const running = b.service.run(
      'quiet:join',
      () => new Promise<string>((resolve) => (finish = () => resolve('ran'))),
      { onBusy: 'join' },
    );
    await sleep(2 * REFRESH_MS);
    await new LeaseOperator(a.service).drain('quiet:join', { by: 'ops', reason: 'maintenance' });
    // Before: b's view was the one of its last attempt, 2 s old, and the call joined the run.
    const joined = b.service.run('quiet:join', () => 'joined', { onBusy: 'join' });
    joined.catch(() => undefined);
    // The run ends a moment later: a call that joined it would resolve with its result.
    setTimeout(() => finish(), 300);
    await expect(joined).rejects.toBeInstanceOf(LeaseDrainedError);
    await expect(running).resolves.toBe('ran');
    await new LeaseOperator(a.service).undrain('quiet:join', { by: 'ops', reason: 'done' });
  });

  test('a lock another session holds on the drain table: the first attempt after a quiet spell waits for it, bounded like any statement; a cancelled one ends at once and leaves nothing', async () => {
    const a = await db.open({}, 'locked-out');
    await sleep(2 * REFRESH_MS);
    const locker = await adminClient(db.url);
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE job_lease_drain IN ACCESS EXCLUSIVE MODE');
      // A waiting call cancelled while the drain read waits for the lock: it rejects at once.
      const controller = new AbortController();
      const cancelled = a.service.acquire('locked:1', { signal: controller.signal });
      cancelled.catch(() => undefined);
      setTimeout(() => controller.abort(new Error('the caller is gone')), 300);
      const started = performance.now();
      await expect(cancelled).rejects.toThrow('the caller is gone');
      expect(performance.now() - started).toBeLessThan(REFRESH_MS);
      // A tryAcquire waits for the read (a drain committed before the lock must not be missed), then is granted.
      let settled = false;
      const trying = a.service.tryAcquire('locked:2').finally(() => (settled = true));
      await sleep(500);
      expect(settled).toBe(false);
      await locker.query('ROLLBACK');
      const lease = await trying;
      expect(lease).not.toBeNull();
      await lease!.release();
    } finally {
      await locker.end();
    }
    // What the cancelled call's attempt got once the lock was gone is given back: no lease, no waiter row.
    await eventually(
      () =>
        db.admin.query<{ n: number }>(
          `SELECT (SELECT count(*) FROM job_lease WHERE target_id = 'locked:1' AND lease_token IS NOT NULL)
                + (SELECT count(*) FROM job_lease_waiter WHERE target_id = 'locked:1') AS n`,
        ),
      (result) => Number(result.rows[0].n) === 0,
      'the cancelled call left nothing',
    );
  });

  test('close() while the first attempt after a quiet spell waits for its drain read: the call is refused as shut down, nothing is left', async () => {
    const a = await db.open({}, 'closing');
    await sleep(2 * REFRESH_MS);
    const locker = await adminClient(db.url);
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE job_lease_drain IN ACCESS EXCLUSIVE MODE');
      const trying = a.service.tryAcquire('closing:1');
      trying.catch(() => undefined);
      await sleep(300);
      const closing = a.close();
      await sleep(300);
      await locker.query('ROLLBACK');
      await expect(trying).rejects.toBeInstanceOf(LeaseShutdownError);
      await closing;
    } finally {
      await locker.end();
    }
    const { rows } = await db.admin.query(`SELECT count(*)::int AS n FROM job_lease WHERE target_id = 'closing:1'
      AND lease_token IS NOT NULL`);
    expect(rows[0].n).toBe(0);
  });

  test('a process that keeps attempting refreshes its view about once a second, not once per attempt', async () => {
    const a = await db.open({}, 'busy:a');
    const b = await db.open({}, 'busy-drainer');
    const { attempts, reads } = await countDrainReads('busy:', async (reads) => {
      let attempts = 0;
      const until = performance.now() + 2 * REFRESH_MS;
      while (performance.now() < until) {
        const lease = await a.service.tryAcquire(`busy:${attempts++ % 4}`);
        await lease?.release();
        await sleep(5);
      }
      return { attempts, reads: reads() };
    });
    expect(attempts).toBeGreaterThan(50);
    expect(reads).toBeGreaterThanOrEqual(1);
    expect(reads).toBeLessThanOrEqual(4);
    // And a drain made in another process is seen within the refresh period plus a statement, without a pause.
    await new LeaseOperator(b.service).drain('busy:0', { by: 'ops', reason: 'maintenance' });
    const drainedAt = performance.now();
    let refused: unknown;
    while (!refused && performance.now() - drainedAt < 3 * REFRESH_MS) {
      refused = await a.service.tryAcquire('busy:0').then(
        (lease) => lease?.release().then(() => undefined),
        (error: unknown) => error,
      );
      await sleep(5);
    }
    expect(refused).toBeInstanceOf(LeaseDrainedError);
    expect(performance.now() - drainedAt).toBeLessThan(2 * REFRESH_MS);
    await new LeaseOperator(b.service).undrain('busy:0', { by: 'ops', reason: 'done' });
  });
});
