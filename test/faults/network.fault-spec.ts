/**
 * Network faults through an in-test TCP proxy between one holder and PostgreSQL (its pool, heartbeat and LISTEN
 * connections all go through it): delay, dropped replies, blackhole; and the stale-release ABA case.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { LeaseService } from 'nest-pg-lease';
import { ownRow, resolveLeaseOptions, LeaseStore, mergeLeaseOptions } from '../../libs/lease/src/internal.js';
import { createTestDatabase, makeDataSource } from '../support/db.js';
import { check } from './support/checker.js';
import {
  connect,
  LEASE,
  ms,
  prepareTables,
  type Received,
  sleep,
  startScripted,
  type Worker,
} from './support/harness.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { recordScenario } from './support/report.js';

const KEY = 'net:k';
const TIMEOUT = LEASE.timing!.leaseTimeoutMs!;
// A wide margin between the holder's local deadline and the earliest takeover, for a loaded machine.
const NET_LEASE = mergeLeaseOptions(LEASE, { timing: { safetyMarginMs: 500 } });

let db: Awaited<ReturnType<typeof createTestDatabase>>;
let admin: pg.Client;
let proxy: TcpProxy;
let proxied: string;

beforeEach(async () => {
  db = await createTestDatabase('faults');
  await prepareTables(db.url, [KEY]);
  admin = await connect(db.url);
  proxy = TcpProxy.forUrl(db.url);
  proxied = await proxy.start(db.url);
});

afterEach(async () => {
  await proxy.stop();
  await admin.end();
  await db.drop();
});

test('delay and dropped replies are ridden out; a blackhole longer than the timeout aborts the holder locally before anyone else acquires', async () => {
  const started = performance.now();
  const log: Received[] = [];
  const workers: Worker[] = [];
  try {
    const a = await startScripted('net-A', proxied, log, NET_LEASE);
    const b = await startScripted('net-B', db.url, log, NET_LEASE);
    workers.push(a, b);
    const tokenA = await a.command<string>({ op: 'acquire', key: KEY });
    const lostA = () => log.some((r) => r.worker === 'net-A' && r.msg.t === 'lost');

    // Each way. Kept well under the heartbeat interval: the heartbeat's statement and connect timeouts equal the
    // interval, and a reconnect costs several round trips.
    proxy.set('delay', 10);
    await sleep(TIMEOUT);
    expect(await a.command({ op: 'write', key: KEY, opId: randomUUID() })).toBe('ack');
    proxy.set('pass');

    // Shorter than the local deadline (timeout − margin): the heartbeat retries on a fresh connection and keeps it.
    proxy.set('drop');
    await sleep(300);
    proxy.set('pass');
    await sleep(TIMEOUT);
    expect(lostA()).toBe(false);
    expect(await a.command({ op: 'write', key: KEY, opId: randomUUID() })).toBe('ack');

    proxy.set('blackhole');
    const blackholedAt = performance.now();
    const acquiredB = b.command<string>({ op: 'acquire', key: KEY, waitTimeoutMs: 15_000 });
    const aborted = await a.waitFor((m) => m.t === 'aborted' && m.fencingToken === tokenA, 'A aborted locally', 15_000);
    const tokenB = await acquiredB;
    const bAcquiredAt = performance.now();
    expect(BigInt(tokenB)).toBeGreaterThan(BigInt(tokenA));
    expect(aborted.at).toBeLessThan(bAcquiredAt);
    expect(await b.command({ op: 'write', key: KEY, opId: randomUUID() })).toBe('ack');

    // Healed: the renewal stuck in the blackhole reaches the server now, and must not renew anything.
    proxy.set('pass');
    expect(await a.command({ op: 'write', key: KEY, opId: randomUUID() })).toBe('refused');
    await sleep(3 * LEASE.timing!.heartbeatIntervalMs!);
    const row = (await admin.query('SELECT fencing_token::text FROM job_lease WHERE target_id = $1', [KEY])).rows[0];
    expect(row.fencing_token).toBe(tokenB);

    const result = await check(admin, log);
    recordScenario({
      scenario: 'TCP proxy: delay, drop, blackhole',
      faults: `delay 10 ms each way for ${TIMEOUT} ms; replies dropped 300 ms; blackhole until the takeover (holder aborted ${ms(bAcquiredAt - aborted.at)} ms before it)`,
      writes: `${result.writes} / ${result.refused}`,
      violations: result.violations.length,
      takeoverMs: ms(bAcquiredAt - blackholedAt),
      wallMs: performance.now() - started,
    });
    expect(result.violations).toEqual([]);
    expect(result).toMatchObject({ writes: 3, acked: 3, refused: 1 });
  } finally {
    await Promise.all(workers.map((w) => w.end(2_000)));
  }
});

test('stale release ABA: a release whose reply was lost, a new acquisition, then the retried old release: the new lease survives', async () => {
  const started = performance.now();
  const dataSource = makeDataSource(proxied);
  await dataSource.initialize();
  const service = new LeaseService(dataSource, { ...LEASE, owner: 'aba' });
  await service.init();
  const pool = new pg.Pool({ connectionString: db.url, max: 1 });
  try {
    const first = (await service.tryAcquire(KEY))!;
    proxy.set('drop');
    await first.release(); // the release reaches the server; its reply never comes back
    proxy.set('pass');
    const held = await admin.query('SELECT 1 FROM job_lease WHERE target_id = $1 AND lease_token IS NOT NULL', [KEY]);
    expect(held.rowCount).toBe(0);
    const second = (await service.tryAcquire(KEY))!;
    expect(second).not.toBeNull();

    // The retry of the old release, with the library's own statement, then the user's own retry.
    const store = new LeaseStore(pool, pool, resolveLeaseOptions(LEASE));
    expect(await store.release(ownRow(KEY), first.token, 5_000)).toBe(false);
    await first.release();

    await sleep(3 * LEASE.timing!.heartbeatIntervalMs!);
    const rows = (
      await admin.query('SELECT lease_token::text, fencing_token::text FROM job_lease WHERE target_id = $1', [KEY])
    ).rows;
    expect(rows).toEqual([{ lease_token: second.token, fencing_token: second.fencingToken.toString() }]);
    expect(second.isHeld()).toBe(true);
    await second.fenced((manager) => manager.query('UPDATE fault_counter SET n = n + 1 WHERE target = $1', [KEY]));
    recordScenario({
      scenario: 'stale release ABA',
      faults: 'release reply dropped; re-acquire; old release retried',
      writes: '1 / 0',
      violations: 0,
      wallMs: performance.now() - started,
    });
    await second.release();
  } finally {
    await service.close();
    await dataSource.destroy();
    await pool.end();
  }
});
