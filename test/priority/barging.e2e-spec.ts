import { eventually, useTestDatabase } from '../support/db.js';
import { holderOf, procsOf, track, untilAsleep, untilQueued, waiterRows } from './helpers.js';

const db = useTestDatabase('prio_barging');
const proc = procsOf(db);

/**
 * A priority-5 waiter is queued behind a holder; newcomers of `newcomerPriority` call tryAcquire in a tight loop
 * from before the release until the waiter holds the lease. Returns how often a newcomer won first.
 */
async function raceNewcomers(key: string, newcomerPriority: number) {
  // Roomy leases and waiter rows: a loaded machine (load 6) let the 600 ms waiter row of the test timings expire
  // under the newcomers' loop, and an equal newcomer then rightly took the key. The race is release → grant.
  const roomy = { timing: { heartbeatIntervalMs: 200, leaseTimeoutMs: 5_000, waiterTimeoutMs: 3_000 } };
  const holder = await proc('holder', roomy);
  const held = (await holder.service.tryAcquire(key))!;
  const waiter = await proc('waiter-p5', roomy);
  const waiting = track(waiter.service.acquire(key, { priority: 5, onBusy: { wait: { timeoutMs: 30_000 } } }));
  await untilQueued(db.admin, key, waiter.owner);

  const newcomers = await Promise.all([1, 2, 3].map((n) => proc(`newcomer${n}-p${newcomerPriority}`, roomy)));
  let stop = false;
  let attempts = 0;
  const wins: string[] = [];
  const loops = newcomers.map(async (newcomer) => {
    while (!stop) {
      attempts++;
      const lease = await newcomer.service.tryAcquire(key, { priority: newcomerPriority });
      if (lease) {
        wins.push(newcomer.name);
        await lease.release();
      }
    }
  });
  await eventually(
    () => attempts,
    (n) => n >= 30,
    'newcomers looping',
  );
  const before = attempts;
  await held.release();
  const lease = await waiting.promise;
  stop = true;
  await Promise.all(loops);
  console.log(
    `newcomers at priority ${newcomerPriority}: ${attempts - before} tryAcquire calls between release and grant, ${attempts} in all; wins: ${wins.length}`,
  );
  expect(await holderOf(db.admin, key)).toBe(waiter.owner);
  await lease.release();
  return wins;
}

test('a newcomer of lower priority never wins before a queued waiter, even in a tight loop', async () => {
  expect(await raceNewcomers('barge:lower', 1)).toEqual([]);
});

test('a newcomer of equal priority never wins before a waiter that queued earlier', async () => {
  expect(await raceNewcomers('barge:equal', 5)).toEqual([]);
});

test('the acquire statement itself refuses lower and equal newcomers on a free target, and admits a higher one', async () => {
  const key = 'barge:precheck';
  // Without NOTIFY the release frees the target instead of handing it to the waiter (direct handoff).
  const holder = await proc('holder', { connections: { notify: false } });
  const held = (await holder.service.tryAcquire(key))!;
  // No NOTIFY and a long poll: after the release the waiter sleeps for seconds, so only the statement's own
  // check stands between a newcomer and the free target.
  const waiter = await proc(
    'sleepy-p5',
    { connections: { notify: false }, timing: { waitPollIntervalMs: 20_000, waiterTimeoutMs: 30_000 } },
    1,
  );
  const waiting = track(waiter.service.acquire(key, { priority: 5, onBusy: { wait: { timeoutMs: 30_000 } } }));
  await untilAsleep(db.admin, key, waiter);
  await held.release();
  expect(await holderOf(db.admin, key)).toBeNull();

  const newcomer = await proc('newcomer');
  expect(await newcomer.service.tryAcquire(key, { priority: 1 })).toBeNull();
  expect(await newcomer.service.tryAcquire(key, { priority: 5 })).toBeNull();
  expect(await newcomer.service.tryAcquire(key)).toBeNull();
  // The grant order (docs/guarantees.md) forbids passing a waiter of higher or equal priority only: a strictly higher newcomer may go first.
  const higher = await newcomer.service.tryAcquire(key, { priority: 6 });
  expect(higher).not.toBeNull();
  expect(waiting.settled()).toBe(false);
  await higher!.release();
});

test('a dead waiter (stale heartbeat) does not hold newcomers back', async () => {
  const key = 'barge:ghost';
  const newcomer = await proc('newcomer');
  await db.admin.query(
    `INSERT INTO job_lease_waiter (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
     VALUES ($1, gen_random_uuid(), 'ghost', 9, 600, now(), nextval('job_lease_waiter_seq'), now() - interval '1 second')`,
    [key],
  );
  const lease = await newcomer.service.tryAcquire(key, { priority: 1 });
  expect(lease).not.toBeNull();
  // Whoever looks next removes it: here the winner, in its acquire statement.
  expect(await waiterRows(db.admin, key)).toEqual([]);
  await lease!.release();
  // The same row with a fresh heartbeat does hold them back: the check above was about liveness.
  await db.admin.query(
    `INSERT INTO job_lease_waiter (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
     VALUES ($1, gen_random_uuid(), 'alive', 9, 600, now(), nextval('job_lease_waiter_seq'), now() + interval '1 hour')`,
    [key],
  );
  expect(await newcomer.service.tryAcquire(key, { priority: 1 })).toBeNull();
});
