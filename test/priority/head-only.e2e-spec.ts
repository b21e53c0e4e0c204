/**
 * Head-only handoff (issue 14 item 3): a release names the next waiter in its NOTIFY; only that waiter attempts, the
 * others stay asleep; a missed or stale notification is still covered by the poll.
 */
import pg from 'pg';
import { interceptHeadWakeups } from '../../libs/lease/src/internal.js';
import { eventually, useTestDatabase } from '../support/db.js';
import { procsOf, type Proc, track, untilAsleep } from './helpers.js';

const db = useTestDatabase('headonly');
const proc = procsOf(db, { ignoreCloseErrors: true });

/**
 * The statements the processes of this file send on their statement pools (`<owner>:statements`) from now on, but
 * the drain cache's read of its table, which every process makes once a second whatever it waits for (README
 * "Operator's console"): what a wake-up would send. The processes run in this Jest process, so a logger on pg's
 * client sees every statement they send.
 */
function statementsFrom(): { of(p: Proc): string[]; stop(): void } {
  const sent: Array<{ from: string; text: string }> = [];
  const original = pg.Client.prototype.query;
  pg.Client.prototype.query = function (this: pg.Client, config: unknown, ...rest: unknown[]) {
    const text = typeof config === 'string' ? config : (config as { text?: string })?.text;
    const from = (this as { connectionParameters?: { application_name?: string } }).connectionParameters
      ?.application_name;
    if (text && from && !/^SELECT kind, subject, actor, reason, at FROM .*_drain"/.test(text))
      sent.push({ from, text });
    return (original as (...args: unknown[]) => unknown).call(this, config, ...rest);
  } as typeof original;
  return {
    of: (p) => sent.filter((s) => s.from === `${p.owner}:statements`).map((s) => s.text),
    stop: () => void (pg.Client.prototype.query = original),
  };
}

test('only the named waiter attempts: the others stay asleep through two handoffs', async () => {
  const key = 'head:asleep';
  const holder = await proc('holder');
  const held = (await holder.service.tryAcquire(key))!;
  expect(held).not.toBeNull();
  // Polls far away (10–20 s): only a NOTIFY can wake these waiters within the test.
  const slow = { timing: { waitPollIntervalMs: 20_000, waiterTimeoutMs: 30_000 } };
  const waiters = [await proc('w1', slow, 1), await proc('w2', slow, 1), await proc('w3', slow, 1)];
  const calls = waiters.map((w, i) =>
    track(w.service.acquire(key, { priority: i + 1, onBusy: { wait: { timeoutMs: 60_000 } } })),
  );
  for (const w of waiters) await untilAsleep(db.admin, key, w);
  const sent = statementsFrom();
  try {
    await held.release();
    const first = await calls[2].promise;
    // Neither other waiter was woken by the first handoff: no statement since they went to sleep.
    expect(sent.of(waiters[1])).toEqual([]);
    expect(sent.of(waiters[0])).toEqual([]);
    await first.release();
    const second = await calls[1].promise;
    expect(sent.of(waiters[0])).toEqual([]);
    // The named waiters did attempt (the logger sees their statements).
    expect(sent.of(waiters[1]).length).toBeGreaterThan(0);
    await second.release();
  } finally {
    sent.stop();
  }
  const third = await calls[0].promise;
  await third.release();
  expect(calls.every((call) => call.settled())).toBe(true);
});

test('a dropped head-only notification is covered by the poll', async () => {
  const key = 'head:dropped';
  const holder = await proc('holder');
  const held = (await holder.service.tryAcquire(key))!;
  const waiter = await proc('dropper', { timing: { waitPollIntervalMs: 2_000, waiterTimeoutMs: 30_000 } }, 1);
  // The named waiter's wake-up never reaches it (a lost NOTIFY, as far as the wait can tell).
  const dropped: string[] = [];
  interceptHeadWakeups(waiter.service, (wakeup) => void dropped.push(wakeup.waiterId));
  const call = track(waiter.service.acquire(key, { onBusy: { wait: { timeoutMs: 60_000 } } }));
  await untilAsleep(db.admin, key, waiter);
  const released = performance.now();
  await held.release();
  await eventually(
    () => dropped.length,
    (n) => n === 1,
    'the NOTIFY naming the waiter (dropped)',
  );
  const lease = await call.promise;
  const handoffMs = performance.now() - released;
  console.log(`handoff with the NOTIFY dropped: ${handoffMs.toFixed(0)} ms (poll 2 s, jittered 1–2 s)`);
  // Only the poll could have woken it: at least half a poll interval after the release.
  expect(handoffMs).toBeGreaterThanOrEqual(900);
  await lease.release();
});
