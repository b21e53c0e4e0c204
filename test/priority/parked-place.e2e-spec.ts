/**
 * The hot key's re-queue riding on the release (issue 40). A process that asked for a key again soon after releasing
 * it, and holds it through the line, is likely to ask again: the release that hands the key to the next waiter also
 * queues this process at the end of its priority (a parked place, in the same statement and commit). A waiting call
 * of the same key and priority adopts that place and sends nothing until its turn; a place nobody adopts leaves on its
 * own, and a grant handed to it before a call adopts it is passed on at once.
 *
 * The statements are counted on the wire side of `pg`, by the connection's application name; the polls are 30 s apart,
 * so every statement counted comes from the calls themselves.
 */
import pg from 'pg';
import { LeaseDrainedError, LeaseOperator } from 'nest-pg-lease';
import { eventually, useTestDatabase } from '../support/db.js';
import { recordNamedStatements } from '../support/named-statements.js';
import { procsOf, rowsOf, track, type Proc, waiterRows } from './helpers.js';
import { PARK_WINDOW_MS, useParkWindow } from '../../libs/lease/src/internal.js';

/** Statement kinds of the line: acquisitions, the waiter's, the releases. */
const KINDS = /_(acquire|acquire_or_queue|confirm_grant|enqueue|dequeue|release|release_and_park|release_lone)$/;

/** The statements of the line sent by each process's connections, by kind, in order. */
function recordStatements() {
  const recording = recordNamedStatements(KINDS);
  return { stop: recording.stop, of: (proc: Proc) => recording.of(proc.owner) };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('the parked place: a hot key re-queues with its release', () => {
  const db = useTestDatabase('parked_place');
  const proc = procsOf(db);
  // Slow polls: a statement counted is the calls' own. Waiter rows live 10 s: a grant stuck on a place nobody adopts
  // would hold the key that long, far past what the specs allow. A 1 s heartbeat: a wait that gives up waits up to
  // 1 s (not the suites' 100 ms) for its row's removal before it rejects, so a loaded machine does not fail the spec.
  const SLOW_POLL = {
    timing: {
      waitPollIntervalMs: 30_000,
      defaultWaitTimeoutMs: 20_000,
      waiterTimeoutMs: 10_000,
      heartbeatIntervalMs: 1_000,
      leaseTimeoutMs: 10_000,
    },
  };
  let recording: ReturnType<typeof recordStatements> | undefined;
  afterEach(() => recording?.stop());

  /**
   * `a` and `b` with their LISTEN connections open (each has waited once), and `key` hot for `a`: it released the
   * key, asked again at once, and holds it through the line (granted by `b`'s release) with `b` queued behind it.
   */
  async function hotFor(key: string, priority = 0) {
    const a = await proc('a', SLOW_POLL, 2);
    const b = await proc('b', SLOW_POLL, 2);
    const first = (await b.service.tryAcquire(key))!;
    const aWaits = a.service.acquire(key, { priority });
    await eventually(
      () => rowsOf(db.admin, key, a.owner),
      (rows) => rows.length === 1,
      'a queued',
    );
    await first.release();
    await (await aWaits).release();
    // Asked again at once, through the line: b holds it first.
    const held = (await b.service.tryAcquire(key))!;
    const aAgain = a.service.acquire(key, { priority });
    await eventually(
      () => rowsOf(db.admin, key, a.owner),
      (rows) => rows.length === 1,
      'a queued again',
    );
    await held.release();
    const lease = await aAgain;
    const bWaits = track(b.service.acquire(key));
    await eventually(
      () => rowsOf(db.admin, key, b.owner),
      (rows) => rows.length === 1,
      'b queued behind a',
    );
    return { a, b, lease, bWaits };
  }

  test('a call that asks again adopts the place its release queued, and sends nothing until its grant', async () => {
    const key = 'park:adopted';
    const { a, lease, bWaits } = await hotFor(key);
    recording = recordStatements();
    await lease.release();
    // The release handed the key to b and queued a behind it, in the same statement.
    expect(await rowsOf(db.admin, key, a.owner)).toHaveLength(1);
    const again = track(a.service.acquire(key));
    const bLease = await bWaits.promise;
    await sleep(300);
    expect(recording.of(a)).toEqual(['release_and_park']);
    expect(again.settled()).toBe(false);
    await bLease.release();
    const aLease = await again.promise;
    expect(aLease.isHeld()).toBe(true);
    expect(recording.of(a)).toEqual(['release_and_park', 'confirm_grant']);
    await aLease.release();
  });

  test('a call that adopted the place and is cancelled removes the row before it rejects', async () => {
    const key = 'park:cancelled';
    const { a, lease, bWaits } = await hotFor(key);
    recording = recordStatements();
    await lease.release();
    const cancel = new AbortController();
    const again = track(a.service.acquire(key, { signal: cancel.signal }));
    const bLease = await bWaits.promise;
    await sleep(100);
    // Adopted: no statement of its own so far.
    expect(recording.of(a)).toEqual(['release_and_park']);
    cancel.abort(new Error('the request went away'));
    await expect(again.promise).rejects.toThrow('the request went away');
    expect(await rowsOf(db.admin, key, a.owner)).toHaveLength(0);
    // b's release finds no one of a's in line: the key is free at once.
    await bLease.release();
    expect(await waiterRows(db.admin, key)).toHaveLength(0);
    const next = await a.service.tryAcquire(key);
    expect(next).not.toBeNull();
    await next!.release();
  });

  test('a place nobody adopts leaves within the window; the key is not held for it', async () => {
    const key = 'park:left';
    const { a, b, lease, bWaits } = await hotFor(key);
    await lease.release();
    expect(await rowsOf(db.admin, key, a.owner)).toHaveLength(1);
    const bLease = await bWaits.promise;
    await eventually(
      () => rowsOf(db.admin, key, a.owner),
      (rows) => rows.length === 0,
      'the parked place left',
      PARK_WINDOW_MS + 2_000,
    );
    await bLease.release();
    // Free at once: nothing was handed to a.
    const next = await b.service.tryAcquire(key);
    expect(next).not.toBeNull();
    await next!.release();
  });

  test('a grant handed to a place before any call adopts it is passed on at once', async () => {
    const key = 'park:passed-on';
    const { a, lease, bWaits } = await hotFor(key);
    const c = await proc('c', SLOW_POLL, 2);
    // A window far longer than the test allows: only the pass-on at the grant hands the key to c in time.
    useParkWindow(a.service, 30_000);
    await lease.release();
    const bLease = await bWaits.promise;
    const cWaits = track(c.service.acquire(key));
    await eventually(
      () => waiterRows(db.admin, key),
      (rows) => rows.map((row) => row.owner).join() === [a.owner, c.owner].join(),
      'c queued behind the parked place',
    );
    // b hands the key to a's parked place: a has no call for it, and passes it on to c at once.
    const handedAt = performance.now();
    await bLease.release();
    const cLease = await cWaits.promise;
    expect(performance.now() - handedAt).toBeLessThan(2_000);
    expect(await rowsOf(db.admin, key, a.owner)).toHaveLength(0);
    await cLease.release();
  });

  test('a call of another priority does not adopt the place; it queues by its own', async () => {
    const key = 'park:other-priority';
    const { a, lease, bWaits } = await hotFor(key, 0);
    recording = recordStatements();
    await lease.release();
    const again = track(a.service.acquire(key, { priority: 5 }));
    const bLease = await bWaits.promise;
    await eventually(
      () => rowsOf(db.admin, key, a.owner),
      (rows) => rows.length === 1 && rows[0].priority === 5,
      'the call queued at its own priority, the parked place gone',
      PARK_WINDOW_MS + 2_000,
    );
    expect(recording.of(a).slice(0, 2)).toEqual(['release_and_park', 'acquire_or_queue']);
    await bLease.release();
    await (await again.promise).release();
  });

  test('close() removes a parked place', async () => {
    const key = 'park:closed';
    const { a, lease, bWaits } = await hotFor(key);
    await lease.release();
    expect(await rowsOf(db.admin, key, a.owner)).toHaveLength(1);
    await a.close();
    expect(await rowsOf(db.admin, key, a.owner)).toHaveLength(0);
    // Nothing of it is left in the process either: no call waits.
    expect(a.service.waitingCount()).toBe(0);
    await (await bWaits.promise).release();
  });

  test('close() while the release that parks is held up inside PostgreSQL: the place it queued goes too', async () => {
    const key = 'park:closed-mid-release';
    const { a, lease, bWaits } = await hotFor(key);
    recording = recordStatements();
    // Another session holds the lease row: the release waits for it on the server.
    const blocker = new pg.Client({ connectionString: db.url });
    await blocker.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query('SELECT 1 FROM job_lease WHERE target_id = $1 AND slot = 0 FOR UPDATE', [key]);
      const releasing = lease.release();
      await eventually(
        async () =>
          (
            await db.admin.query(
              `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE $1 AND wait_event_type = 'Lock'`,
              [`${a.owner}:%`],
            )
          ).rows[0].n,
        (n) => n === 1,
        'the release waits for the row lock',
      );
      const closing = a.close();
      await blocker.query('COMMIT');
      await Promise.all([releasing, closing]);
    } finally {
      await blocker.end();
    }
    // The release handed the key to b and queued a's place; close() waited for it and removed it.
    expect(recording.of(a)[0]).toBe('release_and_park');
    expect(await rowsOf(db.admin, key, a.owner)).toHaveLength(0);
    await (await bWaits.promise).release();
  });

  test('a drained key is refused to a call that would adopt its place, which writes nothing', async () => {
    const key = 'park:drained';
    const { a, lease, bWaits } = await hotFor(key);
    await lease.release();
    recording = recordStatements();
    await new LeaseOperator(a.service).drain(key, { by: 'ops', reason: 'maintenance' });
    await expect(a.service.acquire(key)).rejects.toBeInstanceOf(LeaseDrainedError);
    // Nothing but the place's own leaving (a dequeue, then a release by its id) once its window ends.
    expect(recording.of(a).filter((kind) => kind !== 'dequeue' && kind !== 'release')).toEqual([]);
    await (await bWaits.promise).release();
    await eventually(
      () => rowsOf(db.admin, key, a.owner),
      (rows) => rows.length === 0,
      'the parked place left',
      PARK_WINDOW_MS + 2_000,
    );
    await new LeaseOperator(a.service).undrain(key, { by: 'ops', reason: 'done' });
  });

  test('after a quiet spell, a drain made in another process: no place parked, the call asking again is refused', async () => {
    const key = 'park:quiet-drained';
    const { a, b, lease, bWaits } = await hotFor(key);
    // a attempts nothing for longer than the drain refresh period (1 s): its view of the drains is not current, and
    // b drains the key meanwhile.
    await sleep(2_500);
    await new LeaseOperator(b.service).drain(key, { by: 'ops', reason: 'maintenance' });
    recording = recordStatements();
    await lease.release();
    await expect(a.service.acquire(key)).rejects.toBeInstanceOf(LeaseDrainedError);
    // A plain release: a place parked on that view would be adopted by the call, which would wait for its grant.
    expect(recording.of(a)).toEqual(['release']);
    await bWaits.promise.catch(() => undefined);
    expect(await rowsOf(db.admin, key, a.owner)).toHaveLength(0);
    await new LeaseOperator(b.service).undrain(key, { by: 'ops', reason: 'done' });
  });

  test('a semaphore slot parks nothing', async () => {
    const key = 'park:slots';
    const a = await proc('a-slots', SLOW_POLL, 2);
    const b = await proc('b-slots', SLOW_POLL, 2);
    const options = { limit: 2 };
    for (let round = 0; round < 3; round++) {
      const held = [(await b.service.tryAcquire(key, options))!, (await b.service.tryAcquire(key, options))!];
      const waits = track(a.service.acquire(key, options));
      await eventually(
        () => rowsOf(db.admin, key, a.owner),
        (rows) => rows.length === 1,
        'a queued for a slot',
      );
      await Promise.all(held.map((one) => one.release()));
      const mine = await waits.promise;
      const other = track(b.service.acquire(key, options));
      const another = track(b.service.acquire(key, options));
      await eventually(
        () => rowsOf(db.admin, key, b.owner),
        (rows) => rows.length === 1,
        'b queued for the last slot',
      );
      await mine.release();
      expect(await rowsOf(db.admin, key, a.owner)).toHaveLength(0);
      await Promise.all([(await other.promise).release(), (await another.promise).release()]);
    }
  });
});
