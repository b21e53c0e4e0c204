/**
 * Leases know when the database's history changed — one real primary and streaming standby per test (made as in the
 * failover runs, support/cluster.ts), one fault each, deterministic:
 *
 * - fencing tokens granted after an asynchronous failover are larger than every token granted before, though the
 *   fencing sequence went back (the token carries the timeline);
 * - every holder of the old history is told at the first renewal that reaches the promoted server (reason
 *   `failover`), whether its row survived or not; its fenced writes are refused there even before that renewal;
 * - behind a PgBouncer whose client connection survives the failover, the renewal itself notices;
 * - a heartbeat connection that reaches a standby ends the leases at once; an acquisition on a standby fails with
 *   `LeaseUnavailableError`;
 * - a waiter queued before the failover, whose row was lost, re-queues at its place and stays ahead of waiters
 *   queued after it (the waiter sequence went back too).
 */
import { createWriteStream, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Logger, type LoggerService } from '@nestjs/common';
import { type Lease, LeaseLostError, LeaseUnavailableError, leaseErrorToHttp } from 'nest-pg-lease';
import pg from 'pg';
import { ownRow, resolveLeaseOptions, LeaseStore, mergeLeaseOptions } from '../../libs/lease/src/internal.js';
import { startPgBouncer } from '../pooler/pgbouncer.js';
import { eventually, startService } from '../support/db.js';
import { promote, startReplicatedPair, waitForCatchUp, type ReplicatedPair } from './support/cluster.js';
import { ARTIFACTS } from './support/scenario.js';

const HEARTBEAT_MS = 250;
/** Long enough that no lease of these tests reaches its local deadline (5.75 s) while a test looks at it. */
const LEASE = {
  timing: { heartbeatIntervalMs: HEARTBEAT_MS, leaseTimeoutMs: 6_000, waiterTimeoutMs: 1_500, shutdownGraceMs: 0 },
};
/**
 * "At the first renewal that reaches the promoted server": a tick comes round within one interval, a renewal in
 * flight at the switch gives up within another; the rest is slack for 2 loaded cores.
 */
const TOLD_WITHIN_MS = 2 * HEARTBEAT_MS + 1_500;
const LOGS = join(ARTIFACTS, 'history');

// The library's log lines (losses, failed heartbeats) go to a file, as in the failover runs.
mkdirSync(LOGS, { recursive: true });
const libraryLog = createWriteStream(join(LOGS, 'library.log'));
const line = (level: string) => (message: unknown) =>
  libraryLog.write(`${new Date().toISOString()} ${level} ${String(message)}\n`);
const fileLogger: LoggerService = { log: line('log'), warn: line('warn'), error: line('error'), debug: line('debug') };
beforeAll(() => Logger.overrideLogger(fileLogger));
afterAll(() => new Promise<void>((resolve) => libraryLog.end(resolve)));

const low = (token: bigint) => token & ((1n << 47n) - 1n);
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function query<R extends pg.QueryResultRow>(url: string, text: string, values: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: url, application_name: 'history-test' });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return (await client.query<R>(text, values)).rows;
  } finally {
    await client.end();
  }
}

/** A primary and its streaming standby with the lease tables and a table written inside fences. */
async function replicatedPair(name: string): Promise<ReplicatedPair> {
  return startReplicatedPair({
    logDir: join(LOGS, name),
    prepare: async (url) => {
      const owner = await startService(url);
      await owner.close();
      await query(url, 'CREATE TABLE fence_log (target text NOT NULL, fencing_token bigint NOT NULL)');
    },
  });
}

/** Everything the primary has written so far is on the standby. */
async function caughtUp(pair: ReplicatedPair): Promise<void> {
  const admin = new pg.Client({ connectionString: pair.urlOf(pair.primary, 'postgres') });
  admin.on('error', () => undefined);
  await admin.connect();
  try {
    await waitForCatchUp(admin);
  } finally {
    await admin.end();
  }
}

/** Crash the primary, promote the standby, point the clients at it (as the failover runs do). Returns the switch. */
async function failover(pair: ReplicatedPair): Promise<number> {
  pair.front.point(undefined);
  await pair.primary.crash();
  pair.front.cut();
  pair.link.point(undefined);
  pair.link.cut();
  const { timeline } = await promote(pair);
  expect(timeline).toBe(2);
  pair.front.point(pair.standby.port);
  return performance.now();
}

/** When and why a lease's signal aborted. */
function watch(lease: Lease): { ended?: { at: number; reason: unknown } } {
  const seen: { ended?: { at: number; reason: unknown } } = {};
  lease.signal.addEventListener('abort', () => {
    const reason = lease.signal.reason;
    seen.ended = { at: performance.now(), reason: reason instanceof LeaseLostError ? reason.reason : String(reason) };
  });
  return seen;
}

/** Retries `attempt` while the promoted server is not reachable yet (connection errors of the old pool). */
async function once<T>(what: string, attempt: () => Promise<T>, until = (_: unknown) => false): Promise<T> {
  const deadline = performance.now() + 30_000;
  for (;;) {
    try {
      return await attempt();
    } catch (error) {
      if (until(error)) throw error;
      if (performance.now() > deadline)
        throw new Error(`${what}: still failing after 30 s (${String(error)})`, { cause: error });
      await sleep(50);
    }
  }
}

test('after an asynchronous failover, tokens are larger than all granted before (the sequence went back)', async () => {
  const pair = await replicatedPair('tokens');
  const app = await startService(pair.url, { ...LEASE, owner: 'tokens' });
  try {
    await (await app.service.tryAcquire('t'))!.release();
    await caughtUp(pair);
    pair.link.blackhole();
    // Acknowledged by the primary, never received by the standby: more sequence values than it logs ahead (32).
    let top = 0n;
    for (let i = 0; i < 100; i++) {
      const lease = (await app.service.tryAcquire('t'))!;
      top = lease.fencingToken;
      await lease.release();
    }
    await failover(pair);
    const after = await once('a grant on the promoted server', async () => (await app.service.tryAcquire('t'))!);
    expect(low(after.fencingToken)).toBeLessThan(low(top)); // the sequence did go back
    expect(after.fencingToken).toBeGreaterThan(top);
    await after.release();
  } finally {
    await app.close();
    await pair.destroy();
  }
});

test('every holder of the old history is told at its first renewal on the promoted server, row or not', async () => {
  const pair = await replicatedPair('told');
  const app = await startService(pair.url, { ...LEASE, owner: 'told' });
  try {
    const kept = (await app.service.tryAcquire('told:kept'))!;
    await caughtUp(pair);
    pair.link.blackhole();
    const cut = (await app.service.tryAcquire('told:cut'))!; // its row never reaches the standby
    await sleep(3 * HEARTBEAT_MS);
    const [keptSeen, cutSeen] = [watch(kept), watch(cut)];
    const switchAt = await failover(pair);
    const rows = await query<{ target_id: string }>(
      pair.urlOf(pair.standby),
      'SELECT target_id FROM job_lease WHERE lease_token = $1',
      [kept.token],
    );
    expect(rows).toEqual([{ target_id: 'told:kept' }]); // its row survived, with its token
    await eventually(() => keptSeen.ended && cutSeen.ended, Boolean, 'both holders told', 15_000);
    for (const [key, seen] of [
      ['told:kept', keptSeen],
      ['told:cut', cutSeen],
    ] as const) {
      const { at, reason } = seen.ended!;
      const inTime = at - switchAt < TOLD_WITHIN_MS;
      expect({ key, reason, inTime }).toEqual({ key, reason: 'failover', inTime: true });
    }
    await expect(kept.fenced(async () => 'never')).rejects.toMatchObject({ reason: 'failover' });
  } finally {
    await app.close();
    await pair.destroy();
  }
});

test('old-history fenced writes are refused on the promoted server, even before the heartbeat notices', async () => {
  const pair = await replicatedPair('fence');
  // Heartbeats far apart: the fenced write is the first statement of the lease on the promoted server.
  const app = await startService(pair.url, {
    timing: { heartbeatIntervalMs: 20_000, leaseTimeoutMs: 120_000 },
    owner: 'fence',
  });
  try {
    const lease = (await app.service.tryAcquire('fence:1'))!;
    await caughtUp(pair);
    await failover(pair);
    const write = () =>
      lease.fenced((manager) =>
        manager.query('INSERT INTO fence_log VALUES ($1, $2)', [lease.targetKey, lease.fencingToken.toString()]),
      );
    const refused = await once('a fenced write on the promoted server', write, (e) => e instanceof LeaseLostError).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(LeaseLostError);
    expect(refused).toMatchObject({ reason: 'failover' });
    expect(lease.signal.aborted).toBe(true);
    expect(await query(pair.urlOf(pair.standby), 'SELECT * FROM fence_log')).toEqual([]);
  } finally {
    await app.close();
    await pair.destroy();
  }
});

test('behind a PgBouncer whose client connection survives the failover, the renewal itself notices', async () => {
  const pair = await replicatedPair('pooler');
  // It retries a server login after a second, not 15 s: the promoted server is there well within the lease timeout.
  const bouncer = await startPgBouncer(pair.url, { poolMode: 'transaction', settings: { server_login_retry: 1 } });
  const app = await startService(
    bouncer.via(pair.url),
    mergeLeaseOptions(LEASE, { connections: { pooler: 'transaction' }, owner: 'pooled' }),
  );
  // The library's renewal on one client connection to the bouncer that is never re-opened: whatever the heartbeat
  // connection does (it re-opens after an error), the check must not depend on a reconnection.
  const client = new pg.Client({ connectionString: bouncer.via(pair.url) });
  let reopened = false;
  client.on('error', () => (reopened = true));
  client.on('end', () => (reopened = true));
  await client.connect();
  const options = resolveLeaseOptions(mergeLeaseOptions(LEASE, { connections: { pooler: 'transaction' } }));
  const pool = (app.dataSource.driver as unknown as { master: pg.Pool }).master;
  const store = new LeaseStore(pool, { withSession: (work) => work(client) }, options);
  try {
    const lease = (await app.service.tryAcquire('pooled:1'))!;
    const other = (await app.service.tryAcquire('pooled:2'))!;
    await caughtUp(pair);
    const seen = watch(lease);
    const switchAt = await failover(pair);
    await eventually(() => seen.ended, Boolean, 'the holder told', 15_000);
    expect(seen.ended!.reason).toBe('failover');
    expect(seen.ended!.at - switchAt).toBeLessThan(TOLD_WITHIN_MS);

    const renewal = await once('a renewal through the surviving client connection', () =>
      store.renew([ownRow('pooled:2')], [other.token], 5_000, { fencingTokens: [other.fencingToken], systemId: null }),
    );
    expect(reopened).toBe(false);
    expect(renewal.failover).toEqual(new Set([other.token]));
    expect(renewal.history).toMatchObject({ recovery: false, timeline: 2n });
    // And the bouncer serves the promoted server: new leases carry its timeline.
    const next = await once('a grant through the bouncer', async () => (await app.service.tryAcquire('pooled:3'))!);
    expect(next.fencingToken >> 47n).toBe(2n);
    await next.release();
  } finally {
    await client.end().catch(() => undefined);
    await app.close();
    await bouncer.stop();
    await pair.destroy();
  }
});

test('acquiring on a standby (in recovery) is a LeaseUnavailableError: HTTP 503, not a raw error', async () => {
  const pair = await replicatedPair('replica');
  const replica = await startService(pair.urlOf(pair.standby), { ...LEASE, owner: 'replica' });
  try {
    const refused = await replica.service.tryAcquire('replica:1').then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(LeaseUnavailableError);
    expect(String((refused as Error).message)).toMatch(/accepts no writes/);
    expect(leaseErrorToHttp(refused)).toMatchObject({ status: 503 });
  } finally {
    await replica.close();
    await pair.destroy();
  }
});

test('a heartbeat connection that reaches a standby ends the leases at once (failover)', async () => {
  const pair = await replicatedPair('standby');
  const app = await startService(pair.url, { ...LEASE, owner: 'standby' });
  try {
    const lease = (await app.service.tryAcquire('standby:1'))!;
    const seen = watch(lease);
    // "The database" now leads to the standby, still in recovery: a DNS name moved too early, a replica endpoint.
    pair.front.point(pair.standby.port);
    pair.front.cut();
    const movedAt = performance.now();
    await eventually(() => seen.ended, Boolean, 'the holder told', 15_000);
    expect(seen.ended!.reason).toBe('failover');
    expect(seen.ended!.at - movedAt).toBeLessThan(TOLD_WITHIN_MS);
  } finally {
    await app.close();
    await pair.destroy();
  }
});

test('a waiter whose row was lost re-queues at its place, ahead of a waiter queued after the failover', async () => {
  const pair = await replicatedPair('waiters');
  const holder = await startService(
    pair.url,
    mergeLeaseOptions(LEASE, { timing: { leaseTimeoutMs: 30_000 }, owner: 'holder' }),
  );
  const early = await startService(pair.url, { ...LEASE, owner: 'early' });
  let late: Awaited<ReturnType<typeof startService>> | undefined;
  try {
    const held = (await holder.service.tryAcquire('line'))!;
    await caughtUp(pair);
    pair.link.blackhole();
    // Waiter places drawn on the primary only: more than the sequence logs ahead, so the standby's is behind.
    await query(pair.urlOf(pair.primary), `SELECT nextval('job_lease_waiter_seq') FROM generate_series(1, 200)`);
    const first = early.service.acquire('line', { priority: 1, onBusy: { wait: { timeoutMs: 60_000 } } });
    await eventually(
      () => query(pair.urlOf(pair.primary), `SELECT 1 FROM job_lease_waiter WHERE owner = 'early'`),
      (rows) => rows.length === 1,
      'the early waiter queued',
    );
    await failover(pair);
    const lineOnPromoted = () =>
      query<{ owner: string; seq: string }>(
        pair.urlOf(pair.standby),
        `SELECT owner, seq::text FROM job_lease_waiter WHERE target_id = 'line' ORDER BY owner`,
      ).catch(() => []);
    const requeued = (rows: Array<{ owner: string }>) => rows.some((row) => row.owner === 'early');
    await eventually(lineOnPromoted, requeued, 'the early waiter re-queued', 20_000);
    late = await startService(pair.url, { ...LEASE, owner: 'late' });
    const second = late.service.acquire('line', { priority: 1, onBusy: { wait: { timeoutMs: 60_000 } } });
    const line = await eventually(lineOnPromoted, (rows) => rows.length === 2, 'both waiters queued', 20_000);
    const seq = Object.fromEntries(line.map((row) => [row.owner, BigInt(row.seq)]));
    expect(low(seq.late)).toBeLessThan(low(seq.early)); // the waiter sequence did go back
    // The holder's pool reaches the promoted server before it releases (a failed release only logs).
    await once('the holder on the promoted server', () => holder.dataSource.query('SELECT 1'));
    const order: string[] = [];
    const granted = [
      first.then((lease) => (order.push('early'), lease)),
      second.then((lease) => (order.push('late'), lease)),
    ];
    await held.release();
    const winner = await Promise.race(granted);
    expect(order).toEqual(['early']);
    await winner.release();
    await (await granted[1]).release();
    expect(order).toEqual(['early', 'late']);
  } finally {
    await late?.close();
    await early.close();
    await holder.close();
    await pair.destroy();
  }
});
