import { LeaseArgumentError, LeaseLostError, LeaseWaitTimeoutError, type Lease, type LeaseEvent } from 'nest-pg-lease';
import { fileURLToPath } from 'node:url';
import { joinersWaiting } from '../../libs/lease/src/internal.js';
import { eventually, type OpenedService, useTestDatabase } from '../support/db.js';
import { startChild, type TestChild } from '../support/processes.js';

const CHILD = fileURLToPath(new URL('./support/preempt-child.ts', import.meta.url));

/** A promise opened from outside. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

/** The reason a lease's signal aborted with, once it does. */
function aborted(lease: Lease): Promise<unknown> {
  return new Promise((resolve) => {
    if (lease.signal.aborted) resolve(lease.signal.reason);
    else lease.signal.addEventListener('abort', () => resolve(lease.signal.reason), { once: true });
  });
}

function collect(opened: OpenedService): { events: LeaseEvent[]; stop: () => void } {
  const events: LeaseEvent[] = [];
  const sub = opened.service.events$.subscribe((event) => events.push(event));
  return { events, stop: () => sub.unsubscribe() };
}

const preemptedEvents = (events: LeaseEvent[]) =>
  events.filter((event): event is Extract<LeaseEvent, { type: 'preempted' }> => event.type === 'preempted');

/**
 * Preemption (issue 24 part 2): a caller of strictly higher priority takes the target over from a running holder —
 * the holder's signal aborts (`preempted`), the preemptor waits for its release up to the grace, then takes over
 * regardless with a higher fencing token; the holder's fenced writes are refused from then on.
 */
describe('preempt: true in one process', () => {
  const db = useTestDatabase('preempt');
  let a: OpenedService;

  beforeAll(async () => {
    a = await db.open({ owner: 'a' });
  });

  test('the holder is told at once and releases: the preemptor gets the target before the grace, token higher', async () => {
    const key = 'preempt:yield';
    const { events, stop } = collect(a);
    const holder = await a.service.acquire(key, { priority: 1 });
    const told = aborted(holder);
    const started = performance.now();
    const preempting = a.service.acquire(key, { priority: 5, onBusy: { preempt: { graceMs: 10_000 } } });
    const reason = await told;
    expect(reason).toBeInstanceOf(LeaseLostError);
    expect((reason as LeaseLostError).reason).toBe('preempted');
    expect(holder.isHeld()).toBe(false);
    await holder.release();
    const lease = await preempting;
    stop();
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(lease.fencingToken > holder.fencingToken).toBe(true);
    const [preempted] = preemptedEvents(events);
    expect(preempted).toMatchObject({
      targetKey: key,
      fencingToken: lease.fencingToken,
      previousFencingToken: holder.fencingToken,
      priority: 5,
      previousPriority: 1,
      forced: false,
    });
    expect(events.filter((event) => event.type === 'lost')).toMatchObject([{ reason: 'preempted' }]);
    await lease.release();
  });

  test('run(): the preempted run sees its signal; the urgent run runs next', async () => {
    const key = 'preempt:run';
    const order: string[] = [];
    const slow = a.service.run(
      key,
      async (lease) => {
        order.push('slow started');
        await aborted(lease);
        order.push('slow told');
        return 'slow stopped';
      },
      { priority: 0, onBusy: 'wait' },
    );
    await eventually(
      () => Promise.resolve(order.length),
      (n) => n === 1,
      'the slow run to start',
    );
    const urgent = await a.service.run(key, () => order.push('urgent ran'), { priority: 9, onBusy: 'preempt' });
    expect(urgent).toBe(3);
    await expect(slow).resolves.toBe('slow stopped');
    expect(order).toEqual(['slow started', 'slow told', 'urgent ran']);
  });

  test('equal or lower priority never preempts: the holder keeps its lease, the caller times out', async () => {
    const key = 'preempt:equal';
    const holder = await a.service.acquire(key, { priority: 5 });
    for (const priority of [5, 4]) {
      await expect(
        a.service.acquire(key, { priority, onBusy: { preempt: { graceMs: 0, waitTimeoutMs: 400 } } }),
      ).rejects.toBeInstanceOf(LeaseWaitTimeoutError);
    }
    expect(holder.isHeld()).toBe(true);
    expect(holder.signal.aborted).toBe(false);
    const row = await db.admin.query(`SELECT preempt_of FROM job_lease WHERE target_id = $1`, [key]);
    expect(row.rows[0].preempt_of).toBeNull();
    await holder.release();
  });

  test('the line is obeyed: a live waiter ahead keeps a preemptor from asking', async () => {
    const key = 'preempt:line';
    const holder = await a.service.acquire(key, { priority: 0 });
    const ahead = a.service.acquire(key, { priority: 9 });
    await eventually(
      () => a.service.list(key),
      (rows) => rows.some((row) => row.state === 'waiting'),
      'the waiter ahead to queue',
    );
    await expect(
      a.service.acquire(key, { priority: 5, onBusy: { preempt: { graceMs: 0, waitTimeoutMs: 400 } } }),
    ).rejects.toBeInstanceOf(LeaseWaitTimeoutError);
    expect(holder.isHeld()).toBe(true);
    await holder.release();
    await (await ahead).release();
  });

  test('a joinable run preempted while a duplicate waits for it: the duplicate runs the work itself after the preemptor', async () => {
    // Regression (found by the preemption fault scenario): the preempted run's 'gone' outcome stayed registered while
    // its release was in flight, and the local duplicate looped on it in microtasks, starving the event loop.
    const key = 'preempt:joined';
    let runs = 0;
    const started = gate();
    const work = async (lease: Lease) => {
      runs += 1;
      if (runs === 1) {
        started.open();
        await aborted(lease);
      }
      return { run: runs };
    };
    const first = a.service.run(key, work, { onBusy: 'join' }).catch((error: unknown) => error);
    await started.opened;
    const duplicate = a.service.run(key, work, { onBusy: { join: { timeoutMs: 20_000 } } });
    await eventually(
      () => Promise.resolve(joinersWaiting(a.service, key)),
      (n) => n === 1,
      'the duplicate to join',
    );
    const urgent = await a.service.acquire(key, { priority: 5, onBusy: 'preempt' });
    expect(await first).toBeInstanceOf(LeaseLostError);
    await urgent.release();
    await expect(duplicate).resolves.toEqual({ run: 2 });
  });

  test('bad preemption options are refused before anything is written', async () => {
    await expect(a.service.acquire('preempt:bad', { preempt: true } as never)).rejects.toBeInstanceOf(
      LeaseArgumentError,
    );
    await expect(a.service.acquire('preempt:bad', { onBusy: { preempt: { graceMs: -1 } } })).rejects.toBeInstanceOf(
      LeaseArgumentError,
    );
    // A preempting join: two policies at once (unrepresentable in the type).
    await expect(
      a.service.run('preempt:bad', () => 1, { onBusy: { preempt: {}, join: {} } } as never),
    ).rejects.toBeInstanceOf(LeaseArgumentError);
    const rows = await db.admin.query(`SELECT 1 FROM job_lease WHERE target_id = 'preempt:bad'`);
    expect(rows.rowCount).toBe(0);
  });
});

/**
 * Two services (two processes as far as the database can tell): the holder hears of the request at its next renewal
 * only, so a holder that ignores its signal is taken over at the end of the grace.
 */
describe('preempt: true across processes', () => {
  const db = useTestDatabase('preempt_remote');
  let holderSide: OpenedService;
  let urgentSide: OpenedService;
  const children: TestChild[] = [];

  beforeAll(async () => {
    // The holder renews rarely: it does not hear of the request before the grace ends, so its fenced write after the
    // grant is refused by the database itself (the row's token), not by its local state.
    holderSide = await db.open({ owner: 'holder', timing: { heartbeatIntervalMs: 2_000, leaseTimeoutMs: 20_000 } });
    urgentSide = await db.open({ owner: 'urgent', timing: { heartbeatIntervalMs: 300, leaseTimeoutMs: 3_000 } });
  });

  afterAll(() => {
    for (const child of children) if (child.process.exitCode === null) child.process.kill('SIGKILL');
  });

  test('a holder that ignores its signal: taken over at ≈ the grace; its fenced write after the grant is refused', async () => {
    const key = 'preempt:ignore';
    const graceMs = 600;
    const { events, stop } = collect(urgentSide);
    const holder = await holderSide.service.acquire(key, { priority: 1 });
    const granted = gate();
    // The holder's work goes on past the request; its write is aimed after the preemptor's grant commits.
    const write = (async () => {
      await granted.opened;
      return holder.fenced(async (manager) => {
        await manager.query('SELECT 1');
        return 'saved';
      });
    })();
    const started = performance.now();
    const lease = await urgentSide.service.acquire(key, { priority: 5, onBusy: { preempt: { graceMs } } });
    const tookMs = performance.now() - started;
    granted.open();
    stop();
    expect(tookMs).toBeGreaterThanOrEqual(graceMs - 5);
    expect(tookMs).toBeLessThan(graceMs + 1_500);
    expect(lease.fencingToken > holder.fencingToken).toBe(true);
    const error = await write.catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(LeaseLostError);
    expect((error as LeaseLostError).reason).toBe('preempted');
    expect(holder.isHeld()).toBe(false);
    expect(preemptedEvents(events)).toMatchObject([
      { forced: true, previousFencingToken: holder.fencingToken, fencingToken: lease.fencingToken, owner: 'urgent' },
    ]);
    // Releasing the preempted handle leaves the new holder's row alone.
    await holder.release();
    const row = await db.admin.query(
      `SELECT owner, lease_token IS NOT NULL AS held FROM job_lease WHERE target_id = $1`,
      [key],
    );
    expect(row.rows[0]).toEqual({ owner: 'urgent', held: true });
    await lease.release();
  });

  test('the holder hears of it at its next renewal (reason preempted) and releases in the grace', async () => {
    const key = 'preempt:renewal';
    const holder = await holderSide.service.acquire(key, { priority: 0 });
    const told = aborted(holder).then(async (reason) => {
      await holder.release();
      return reason;
    });
    const started = performance.now();
    const lease = await urgentSide.service.acquire(key, { priority: 3, onBusy: { preempt: { graceMs: 10_000 } } });
    expect(performance.now() - started).toBeLessThan(8_000);
    expect(((await told) as LeaseLostError).reason).toBe('preempted');
    expect(lease.fencingToken > holder.fencingToken).toBe(true);
    await lease.release();
  });

  test('a holder in another process that ignores its signal never saves after the grant', async () => {
    const key = 'preempt:child';
    const child = startChild(CHILD, { PREEMPT_CHILD: { url: db.url, key } }, { captureOutput: true });
    children.push(child);
    const running = await child.message<{ fencingToken: string }>('running', 30_000);
    const lease = await urgentSide.service.acquire(key, { priority: 7, onBusy: { preempt: { graceMs: 300 } } });
    expect(lease.fencingToken > BigInt(running.fencingToken)).toBe(true);
    child.process.send('write');
    const wrote = await child.message<{ error?: { name: string; reason: string }; saved?: string }>('wrote', 30_000);
    expect(wrote.saved).toBeUndefined();
    expect(wrote.error).toEqual({ name: 'LeaseLostError', reason: 'preempted' });
    const told = await child.message<{ reason: string }>('told', 30_000);
    expect(told.reason).toBe('preempted');
    await lease.release();
  });
});
