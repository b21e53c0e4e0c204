/**
 * A waiter queued behind a live waiter sleeps until a NOTIFY names it: the release that frees the key after the one
 * ahead is done hands it over. A release whose snapshot was taken before the new waiter's row committed does not see
 * that row: it frees the key and names nobody. The new waiter is then the head of a free key's line, asleep, and so is
 * every caller queued after it (a newcomer does not pass a live waiter). Found by a hot key handed back and forth
 * between two processes on a loaded machine: both slept until their polls (15–30 s with the module's defaults).
 *
 * The fault is aimed: the late caller's waiter row is held inside PostgreSQL (a trigger that sleeps for its owner
 * only) while the waiter ahead of it is granted the key and releases it.
 */
import { eventually, useTestDatabase } from '../support/db.js';
import { holderOf, procsOf, rowsOf, sleepingIn, slowEnqueues, track } from './helpers.js';

const db = useTestDatabase('stranded_head');
const proc = procsOf(db);

/** Polls far apart (only NOTIFYs and the waiter heartbeat move a wait here); waiter heartbeats every second. */
const TIMING = {
  timing: {
    waitPollIntervalMs: 60_000,
    defaultWaitTimeoutMs: 50_000,
    waiterTimeoutMs: 3_000,
    heartbeatIntervalMs: 1_000,
    leaseTimeoutMs: 10_000,
  },
};
const ENQUEUE_STALL_S = 3;

describe('a waiter whose queueing a release of the key missed', () => {
  test('is woken by its own waiter heartbeat once the key is free, not left asleep until its poll', async () => {
    const key = 'stranded:head';
    const holder = await proc('holder', TIMING);
    const held = (await holder.service.tryAcquire(key))!;
    const ahead = await proc('ahead', TIMING);
    const aheadWaits = track(ahead.service.acquire(key));
    await eventually(
      () => rowsOf(db.admin, key, ahead.owner),
      (rows) => rows.length === 1,
      'ahead queued',
    );

    const restore = await slowEnqueues(db.admin, 'late', ENQUEUE_STALL_S);
    try {
      const late = await proc('late', TIMING);
      // It has waited once: its LISTEN connection is open, as in a process that waits in the lines of hot keys.
      const warm = (await holder.service.tryAcquire(`${key}:warm`))!;
      const warmWaits = track(late.service.acquire(`${key}:warm`));
      await eventually(
        () => sleepingIn(db.admin, late.owner),
        (n) => n === 1,
        'the warm-up row held inside PostgreSQL',
      );
      await warm.release();
      await (await warmWaits.promise).release();
      // Its statement sees the key held and a live waiter ahead: it is queued behind that one, and sleeps.
      const lateWaits = track(late.service.acquire(key));
      await eventually(
        () => sleepingIn(db.admin, late.owner),
        (n) => n === 1,
        'the late waiter row held inside PostgreSQL',
      );
      // Meanwhile the waiter ahead is granted the key and gives it back: that release cannot see the late row.
      await held.release();
      const aheadLease = await aheadWaits.promise;
      await aheadLease.release();
      expect(await sleepingIn(db.admin, late.owner)).toBe(1);

      await eventually(
        () => rowsOf(db.admin, key, late.owner),
        (rows) => rows.length === 1 || lateWaits.settled(),
        'the late row committed',
        ENQUEUE_STALL_S * 1_000 + 5_000,
      );
      // The key is free and the late caller heads its line; its next waiter heartbeat (every second) finds that.
      await eventually(
        async () => (lateWaits.settled() ? 'granted' : `asleep, the key held by ${await holderOf(db.admin, key)}`),
        (state) => state === 'granted',
        'the late waiter granted (the key free, its row at the head of the line)',
        5_000,
      );
      const lease = await lateWaits.promise;
      expect(lease.isHeld()).toBe(true);
      await lease.release();
    } finally {
      await restore();
    }
  });
});
