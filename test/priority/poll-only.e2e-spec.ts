/**
 * Poll-only mode (`connections: { notify: false }` in every process): the deployment mode for servers and poolers
 * without LISTEN/NOTIFY (docs/scaling.md). No process opens a LISTEN connection; a release frees the row and the
 * waiters take it at their jittered poll (`timing.waitPollIntervalMs`, between half and all of it). Shown here:
 * handoff to a waiting call, priority order, and the takeover of a dead holder all work so, with no LISTEN session on
 * the server — and the handoff latency of both modes, measured on the same handoffs.
 */
import type { Lease, LeaseModuleOptions } from 'nest-pg-lease';
import { eventually, useTestDatabase } from '../support/db.js';
import { acquiredAtMs, watchExpiry } from '../support/row-expiry.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { type Proc, procsOf, startProc, track, untilAsleep, untilQueued } from './helpers.js';

const db = useTestDatabase('prio_poll_only');
const proc = procsOf(db);

const POLL_MS = 400;
const POLL_ONLY: LeaseModuleOptions = { connections: { notify: false }, timing: { waitPollIntervalMs: POLL_MS } };
/** Notify mode with a poll so slow that a quick grant can only be the NOTIFY's. */
const NOTIFY: LeaseModuleOptions = { connections: { notify: true }, timing: { waitPollIntervalMs: 10_000 } };
const HANDOFFS = 8;
const WAIT = { onBusy: { wait: { timeoutMs: 20_000 } } } as const;

/** The sessions of this database that listen, or last ran LISTEN (the library names its LISTEN connection `…:listen`). */
async function listeners(): Promise<string[]> {
  const { rows } = await db.admin.query<{ application_name: string }>(
    `SELECT application_name FROM pg_stat_activity
     WHERE datname = current_database() AND (application_name LIKE '%:listen' OR query ILIKE 'LISTEN %')`,
  );
  return rows.map((row) => row.application_name);
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const latencies: Record<'notify' | 'pollOnly', number[]> = { notify: [], pollOnly: [] };

/** `HANDOFFS` handoffs from a holder to a waiting call, each timed from the release to the waiter's grant. */
async function handoffs(mode: 'notify' | 'pollOnly', options: LeaseModuleOptions): Promise<string[][]> {
  // Closed at the end: the notify mode's LISTEN connection must not linger into the other tests.
  const holder = await startProc(db.url, `${mode}-holder`, options);
  const waiter = await startProc(db.url, `${mode}-waiter`, options, 1);
  try {
    return await handoffsBetween(mode, holder, waiter);
  } finally {
    await waiter.close();
    await holder.close();
  }
}

async function handoffsBetween(mode: 'notify' | 'pollOnly', holder: Proc, waiter: Proc): Promise<string[][]> {
  const seenListening: string[][] = [];
  for (let i = 0; i < HANDOFFS; i++) {
    const key = `${mode}:handoff:${i}`;
    const held = (await holder.service.tryAcquire(key))!;
    const call = track(waiter.service.acquire(key, WAIT));
    await untilAsleep(db.admin, key, waiter);
    seenListening.push(await listeners());
    const released = performance.now();
    await held.release();
    const lease = await call.promise;
    latencies[mode].push(performance.now() - released);
    expect(lease.fencingToken).toBeGreaterThan(held.fencingToken);
    await lease.release();
  }
  return seenListening;
}

describe('poll-only mode (notify: false)', () => {
  test('handoff to a waiting call at its poll, with no LISTEN session on the server', async () => {
    const seen = await handoffs('pollOnly', POLL_ONLY);
    expect(seen).toEqual(Array.from({ length: HANDOFFS }, () => []));
    // At its poll: never later than one interval (plus the statement, on a loaded machine).
    expect(Math.max(...latencies.pollOnly)).toBeLessThan(POLL_MS + 1_500);
  });

  test('the same handoffs in notify mode: woken by NOTIFY, and the server sees the LISTEN session', async () => {
    const seen = await handoffs('notify', NOTIFY);
    // The check above can fail: here every wait shows the waiter's LISTEN connection.
    for (const sessions of seen) expect(sessions.some((name) => name.includes('notify-waiter'))).toBe(true);
    // The poll is 5–10 s: each grant came by NOTIFY.
    expect(Math.max(...latencies.notify)).toBeLessThan(2_000);
    const figure = (values: number[]) =>
      `median ${median(values).toFixed(0)} ms, max ${Math.max(...values).toFixed(0)} ms`;
    console.log(
      `[poll-only] handoff latency, release → waiter's grant, ${HANDOFFS} handoffs each: notify ` +
        `${figure(latencies.notify)}; poll-only (waitPollIntervalMs ${POLL_MS}, jittered ${POLL_MS / 2}–${POLL_MS} ms) ` +
        `${figure(latencies.pollOnly)}`,
    );
    expect(median(latencies.notify)).toBeLessThan(median(latencies.pollOnly));
  });

  test('priority order: the highest priority first, then first come, with no LISTEN session', async () => {
    const key = 'poll:priority';
    const holder = await proc('prio-holder', POLL_ONLY);
    const held = (await holder.service.tryAcquire(key))!;
    const granted: string[] = [];
    const waiters: Array<{ name: string; priority: number }> = [
      { name: 'low', priority: 1 },
      { name: 'high', priority: 5 },
      { name: 'mid-first', priority: 3 },
      { name: 'mid-second', priority: 3 },
    ];
    const calls: Promise<void>[] = [];
    for (const { name, priority } of waiters) {
      const p = await proc(`prio-${name}`, POLL_ONLY, 1);
      calls.push(
        p.service.acquire(key, { ...WAIT, priority }).then(
          async (lease: Lease) => {
            granted.push(name);
            await new Promise((resolve) => setTimeout(resolve, 50));
            await lease.release();
          },
          (error: unknown) => void granted.push(`${name}: ${String(error)}`),
        ),
      );
      // Queued one after the other: their places are in this order.
      await untilQueued(db.admin, key, p.owner);
    }
    expect(await listeners()).toEqual([]);
    await held.release();
    await Promise.all(calls);
    expect(granted).toEqual(['high', 'mid-first', 'mid-second', 'low']);
  });

  test('a dead holder is taken over at the poll once its lease expired, under a higher token', async () => {
    const key = 'poll:dead-holder';
    const proxy = TcpProxy.forUrl(db.url);
    let dead: Proc | undefined;
    try {
      dead = await startProc(await proxy.start(db.url), 'dead-holder', POLL_ONLY);
      const held = (await dead.service.tryAcquire(key))!;
      const waiter = await proc('taker', POLL_ONLY, 1);
      const call = track(waiter.service.acquire(key, WAIT));
      await untilAsleep(db.admin, key, waiter);
      expect(await listeners()).toEqual([]);
      // The holder's process stops answering: no renewal, no release, no NOTIFY (there is none in this mode anyway).
      proxy.freeze();
      const frozen = performance.now();
      // When the dead holder's row expires, by the server's clock, read until the key changes hands.
      const expiry = watchExpiry(db.admin, key, held.fencingToken);
      const lease = await call.promise;
      const afterMs = performance.now() - frozen;
      const expiresAtMs = await expiry.stop();
      expect(lease.fencingToken).toBeGreaterThan(held.fencingToken);
      // Not before the row expired: the grant's own time on the server, against the expiry read above.
      expect(Number.isFinite(expiresAtMs)).toBe(true);
      expect(await acquiredAtMs(db.admin, key, lease.fencingToken)).toBeGreaterThanOrEqual(expiresAtMs);
      expect(afterMs).toBeLessThan(1_000 + POLL_MS + 2_000);
      // The dead holder finds out by itself, at its local deadline.
      await eventually(() => held.signal.aborted, Boolean, 'the dead holder told', 5_000);
      console.log(`[poll-only] dead holder taken over ${afterMs.toFixed(0)} ms after its process froze`);
      await lease.release();
    } finally {
      proxy.thaw();
      await dead?.close().catch(() => undefined);
      await proxy.stop();
    }
  });
});
