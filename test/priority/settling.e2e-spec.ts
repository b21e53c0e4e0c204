/**
 * "A waiting call settles on time" and "nothing outlives its caller" under hostile timing: connections that never
 * open, an enqueue still in flight when the wait gives up, wait times past setTimeout's range, and shutdown in the
 * middle of an acquisition.
 */
import { LeaseArgumentError, LeaseError, LeaseWaitTimeoutError } from 'nest-pg-lease';
import { heartbeatRunning } from '../../libs/lease/src/internal.js';
import { eventually, useTestDatabase } from '../support/db.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { procsOf, rowsOf, sleepingIn, slowEnqueues, startProc, track } from './helpers.js';

const db = useTestDatabase('prio_settling');
const proc = procsOf(db, { ignoreCloseErrors: true });

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('waits settle while new connections never open', () => {
  test('waitTimeoutMs, abort and close() all settle on time although the LISTEN connection cannot open', async () => {
    const holder = await proc('holder');
    await holder.service.tryAcquire('stall:a');
    await holder.service.tryAcquire('stall:b');
    const proxy = TcpProxy.forUrl(db.url);
    const cut = await startProc(await proxy.start(db.url), 'stalled-net', {}, 4);
    try {
      // Warm the pool: its connections keep working; only new ones (LISTEN, heartbeats) stall.
      await Promise.all([1, 2, 3].map(() => cut.dataSource.query('SELECT 1')));
      proxy.stallNewConnections();
      const started = performance.now();
      const timed = track(cut.service.acquire('stall:a', { onBusy: { wait: { timeoutMs: 500 } } }));
      const controller = new AbortController();
      const reason = new Error('the caller went away');
      const aborted = track(
        cut.service.acquire('stall:b', { onBusy: { wait: { timeoutMs: 60_000 } }, signal: controller.signal }),
      );
      await sleep(200);
      controller.abort(reason);
      await eventually(() => timed.settled() && aborted.settled(), Boolean, 'both waits to settle', 10_000);
      const settledMs = performance.now() - started;
      expect(timed.error).toBeInstanceOf(LeaseWaitTimeoutError);
      expect(aborted.error).toBe(reason);
      // waitTimeoutMs 500 + the grace for a statement in flight (≤ 1 s), with room for a loaded machine.
      expect(settledMs).toBeLessThan(2_500);
      const closing = performance.now();
      await cut.service.close();
      expect(performance.now() - closing).toBeLessThan(5_000);
    } finally {
      proxy.thaw();
      await cut.close();
      await proxy.stop();
    }
  });
});

describe('no phantom waiter', () => {
  test('a wait that gives up while its enqueue is in flight leaves no waiter row', async () => {
    const key = 'phantom:a';
    const holder = await proc('holder');
    const held = (await holder.service.tryAcquire(key))!;
    // Test instrumentation: this owner's enqueue takes a second.
    const restore = await slowEnqueues(db.admin, 'phantom', 1);
    try {
      // A long waiter timeout: a phantom row would block the line for 15 s.
      const waiter = await proc('phantom', { timing: { waiterTimeoutMs: 15_000 } });
      const controller = new AbortController();
      const call = track(
        waiter.service.acquire(key, { onBusy: { wait: { timeoutMs: 30_000 } }, signal: controller.signal }),
      );
      await eventually(
        () => sleepingIn(db.admin, waiter.owner),
        (n) => n === 1,
        'the enqueue to be in flight',
      );
      controller.abort(new Error('gave up'));
      await eventually(() => call.settled(), Boolean, 'the wait to settle', 3_000);
      // Once the late INSERT has finished, its row must go too.
      await eventually(
        () => sleepingIn(db.admin, waiter.owner),
        (n) => n === 0,
        'the enqueue to finish',
      );
      await eventually(
        () => rowsOf(db.admin, key, waiter.owner),
        (rows) => rows.length === 0,
        'no row of the phantom',
        2_000,
      );
      // A newcomer is not blocked once the holder releases.
      await held.release();
      const other = await proc('newcomer');
      const lease = await other.service.tryAcquire(key);
      expect(lease).not.toBeNull();
      await lease!.release();
    } finally {
      await restore();
    }
  });
});

describe('an enqueue the caller gave up on', () => {
  test('lands dead: a row written after its wait timed out blocks nobody', async () => {
    const key = 'phantom:late';
    const holder = await proc('holder');
    const held = (await holder.service.tryAcquire(key))!;
    // Test instrumentation: this owner's enqueue stalls in the server for 3 s, far past the wait it serves.
    const restore = await slowEnqueues(db.admin, 'late', 3);
    try {
      // A long waiter timeout: a row born live would block the line for 15 s.
      const waiter = await proc('late', { timing: { waiterTimeoutMs: 15_000 } });
      const call = track(waiter.service.acquire(key, { onBusy: { wait: { timeoutMs: 300 } } }));
      await eventually(() => call.settled(), Boolean, 'the wait to time out', 3_000);
      expect(call.error).toBeInstanceOf(LeaseWaitTimeoutError);
      // The INSERT goes on in the server and commits when the sleep ends.
      await eventually(
        () => sleepingIn(db.admin, waiter.owner),
        (n) => n === 0,
        'the late enqueue to finish',
        10_000,
      );
      const { rows } = await db.admin.query<{ live: boolean }>(
        `SELECT heartbeat_at + timeout_ms * interval '1 millisecond' > clock_timestamp() AS live
         FROM job_lease_waiter WHERE target_id = $1 AND owner = $2`,
        [key, waiter.owner],
      );
      expect(rows.filter((row) => row.live)).toEqual([]);
      // A newcomer is not held back by it once the holder releases.
      await held.release();
      const other = await proc('newcomer-late');
      const lease = await other.service.tryAcquire(key);
      expect(lease).not.toBeNull();
      await lease!.release();
    } finally {
      await restore();
    }
  });
});

describe('wait times past the range of setTimeout', () => {
  test('waitTimeoutMs 2^31 − 1 is honoured (no instant timeout); 2^31 is refused with LeaseArgumentError', async () => {
    const key = 'huge:a';
    const holder = await proc('holder');
    await holder.service.tryAcquire(key);
    const waiter = await proc('huge');
    const controller = new AbortController();
    const reason = new Error('done waiting');
    const call = track(
      waiter.service.acquire(key, { onBusy: { wait: { timeoutMs: 2 ** 31 - 1 } }, signal: controller.signal }),
    );
    await sleep(600);
    expect(call.settled()).toBe(false);
    controller.abort(reason);
    await eventually(() => call.settled(), Boolean, 'the abort to settle the wait', 3_000);
    expect(call.error).toBe(reason);
    await expect(waiter.service.acquire(key, { onBusy: { wait: { timeoutMs: 2 ** 31 } } })).rejects.toBeInstanceOf(
      LeaseArgumentError,
    );
  });

  test('defaultWaitTimeoutMs 2^31 − 1 is honoured too', async () => {
    const key = 'huge:b';
    const holder = await proc('holder');
    await holder.service.tryAcquire(key);
    const waiter = await proc('huge-default', { timing: { defaultWaitTimeoutMs: 2 ** 31 - 1 } });
    const controller = new AbortController();
    const call = track(waiter.service.acquire(key, { priority: 1, signal: controller.signal }));
    await sleep(600);
    expect(call.settled()).toBe(false);
    controller.abort(new Error('stop'));
    await eventually(() => call.settled(), Boolean, 'the abort to settle the wait', 3_000);
  });
});

describe('close() during an acquisition', () => {
  test('after close() resolves, the process holds no row and runs no heartbeat', async () => {
    await db.admin.query(`
      CREATE FUNCTION slow_acquire_closing() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.owner LIKE 'closing-%' THEN PERFORM pg_sleep(0.5); END IF; RETURN NEW; END $$;
      CREATE TRIGGER slow_acquire_closing BEFORE INSERT ON job_lease
        FOR EACH ROW EXECUTE FUNCTION slow_acquire_closing();`);
    try {
      // close() waits up to one heartbeat interval for an acquisition in flight; this one takes half a second.
      const p = await proc('closing', { timing: { heartbeatIntervalMs: 1_000, leaseTimeoutMs: 5_000 } });
      const call = track(p.service.tryAcquire('closing:a'));
      await eventually(
        () => sleepingIn(db.admin, p.owner),
        (n) => n === 1,
        'the acquisition to be in flight',
      );
      await p.service.close();
      // As Nest does at shutdown: the DataSource goes right after the lease service's close().
      await p.dataSource.destroy();
      expect(call.settled()).toBe(true);
      expect(call.error).toBeInstanceOf(LeaseError);
      const held = await db.admin.query(
        `SELECT target_id FROM job_lease WHERE owner = $1 AND lease_token IS NOT NULL`,
        [p.owner],
      );
      expect(held.rows).toEqual([]);
      expect(heartbeatRunning(p.service)).toBe(false);
      expect(p.service.heldLeases()).toEqual([]);
      // Nothing restarts afterwards either.
      await sleep(300);
      expect(heartbeatRunning(p.service)).toBe(false);
    } finally {
      await db.admin.query('DROP TRIGGER slow_acquire_closing ON job_lease; DROP FUNCTION slow_acquire_closing()');
    }
  });
});
