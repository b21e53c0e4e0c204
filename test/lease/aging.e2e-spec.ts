import { adminClient, createTestDatabase, eventually, startService } from '../support/db.js';

/** Opt-in aging: a waiter's effective priority grows by one per agingIntervalMs waited, so low priorities do not starve. */
describe('aging', () => {
  test.each([
    [200, 'old low-priority waiter first'],
    [undefined, 'strict priority: the higher priority first'],
  ])('agingIntervalMs %p → %s', async (agingIntervalMs, _expectation) => {
    const db = await createTestDatabase('aging');
    const admin = await adminClient(db.url);
    const options = { timing: { agingIntervalMs, waitPollIntervalMs: 5_000 } };
    const holder = await startService(db.url, options);
    const low = await startService(db.url, options);
    const high = await startService(db.url, options);
    try {
      const held = (await holder.service.tryAcquire('aging'))!;
      const lowWait = low.service.acquire('aging', { priority: 0, onBusy: { wait: { timeoutMs: 20_000 } } });
      await eventually(
        () => admin.query(`SELECT count(*)::int AS n FROM job_lease_waiter`),
        (r) => r.rows[0].n === 1,
        'low to queue',
      );
      await new Promise((resolve) => setTimeout(resolve, 1_300)); // ≥ 6 aging steps of 200 ms
      const highWait = high.service.acquire('aging', { priority: 3, onBusy: { wait: { timeoutMs: 20_000 } } });
      await eventually(
        () => admin.query(`SELECT count(*)::int AS n FROM job_lease_waiter`),
        (r) => r.rows[0].n === 2,
        'high to queue',
      );
      const listed = (await holder.service.list('aging')).filter((row) => row.state === 'waiting');
      expect(listed.map((row) => row.priority)).toEqual(agingIntervalMs ? [0, 3] : [3, 0]);
      if (agingIntervalMs) expect(listed[0].effectivePriority).toBeGreaterThanOrEqual(6);
      else expect(listed.map((row) => row.effectivePriority)).toEqual([3, 0]);

      const order: string[] = [];
      const lowDone = lowWait.then(async (lease) => {
        order.push('low');
        await lease.release();
      });
      const highDone = highWait.then(async (lease) => {
        order.push('high');
        await lease.release();
      });
      await held.release();
      await Promise.all([lowDone, highDone]);
      expect(order).toEqual(agingIntervalMs ? ['low', 'high'] : ['high', 'low']);
    } finally {
      await Promise.all([holder.close(), low.close(), high.close()]);
      await admin.end();
      await db.drop();
    }
  });
});
