/**
 * Issue 23, part 1: shutdown that lets the work finish. From the moment `close()` begins, new calls are refused with
 * `LeaseShutdownError` and waits are settled; a run in progress (and a handle still held) keeps its lease and its
 * heartbeats until it ends or `shutdownGraceMs` passes; only then is its signal aborted (`LeaseShutdownError`) and its
 * lease released — with its `holdAtLeastMs` tail kept either way.
 */
import { type Lease, LeaseLostError, LeaseShutdownError } from 'nest-pg-lease';
import { eventually, FAST, type OpenedService, useTestDatabase } from '../support/db.js';
import { track } from '../priority/helpers.js';

/** A gate a run waits on while it holds its lease; the test opens it. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

/** Resolves once `lease`'s signal has aborted, with its reason. */
const aborted = (lease: Lease) =>
  new Promise<unknown>((resolve) => {
    if (lease.signal.aborted) resolve(lease.signal.reason);
    else lease.signal.addEventListener('abort', () => resolve(lease.signal.reason), { once: true });
  });

describe('the drain on shutdown', () => {
  const db = useTestDatabase('drain', 'read committed', (admin) =>
    admin.query(`CREATE TABLE drain_saves (target text NOT NULL, fencing_token bigint NOT NULL)`),
  );
  let other: OpenedService;

  beforeAll(async () => {
    other = await db.open({ owner: 'other' });
  });

  const holderOf = async (key: string) =>
    (
      await db.admin.query<{ owner: string; renewed: Date }>(
        `SELECT owner, updated_at AS renewed FROM job_lease
         WHERE target_id = $1 AND lease_token IS NOT NULL AND updated_at + interval '1 ms' * $2 > clock_timestamp()`,
        [key, FAST.timing?.leaseTimeoutMs],
      )
    ).rows[0];
  const saves = async (key: string) =>
    (await db.admin.query(`SELECT fencing_token FROM drain_saves WHERE target = $1`, [key])).rowCount;
  const save = (lease: Lease) =>
    lease.fenced((manager) =>
      manager.query(`INSERT INTO drain_saves VALUES ($1, $2)`, [lease.targetKey, String(lease.fencingToken)]),
    );

  test('a run in progress keeps its lease and heartbeats past a lease timeout, saves, then close() resolves', async () => {
    const key = 'drain:finishes';
    const a = await db.open({ owner: 'finishes', timing: { shutdownGraceMs: 30_000 } });
    const entered = gate();
    const finish = gate();
    const run = track(
      a.service.run(key, async (lease) => {
        entered.open();
        await finish.opened;
        await save(lease);
        return lease.signal.aborted;
      }),
    );
    await entered.opened;
    const waiter = track(a.service.acquire(key, { onBusy: { wait: { timeoutMs: 60_000 } } }));
    await eventually(
      () => a.service.waitingCount(),
      (n) => n === 1,
      'the waiter in line',
    );
    const before = await holderOf(key);
    const closing = track(a.close());
    // The waiter is settled at once; new calls are refused from the moment shutdown began.
    await eventually(() => waiter.settled(), Boolean, 'the waiter settled');
    expect(waiter.error).toBeInstanceOf(LeaseShutdownError);
    await expect(a.service.tryAcquire('drain:new')).rejects.toBeInstanceOf(LeaseShutdownError);
    await expect(a.service.run('drain:new', () => 1)).rejects.toBeInstanceOf(LeaseShutdownError);
    await expect(a.service.acquire('drain:new', { onBusy: { wait: { timeoutMs: 1_000 } } })).rejects.toBeInstanceOf(
      LeaseShutdownError,
    );
    // Past a whole lease timeout the row is still the run's, renewed meanwhile: nobody else can take it.
    await new Promise((resolve) => setTimeout(resolve, FAST.timing!.leaseTimeoutMs! * 1.5));
    const during = await holderOf(key);
    expect(during?.owner).toBe('finishes');
    expect(during.renewed.getTime()).toBeGreaterThan(before.renewed.getTime());
    expect(await other.service.tryAcquire(key)).toBeNull();
    expect(closing.settled()).toBe(false);
    finish.open();
    await eventually(() => closing.settled(), Boolean, 'close() resolved', 10_000);
    expect(closing.error).toBeUndefined();
    expect(await run.promise).toBe(false); // its signal never aborted: it finished with its lease
    expect(await saves(key)).toBe(1);
    expect(await holderOf(key)).toBeUndefined();
    const next = await other.service.tryAcquire(key);
    expect(next).not.toBeNull();
    await next!.release();
  });

  test('a run longer than shutdownGraceMs is aborted with LeaseShutdownError at the grace, its save refused', async () => {
    const key = 'drain:too-long';
    const graceMs = 600;
    const a = await db.open({ owner: 'too-long', timing: { shutdownGraceMs: graceMs } });
    const entered = gate();
    let reason: unknown;
    let refused: unknown;
    const run = track(
      a.service.run(key, async (lease) => {
        entered.open();
        reason = await aborted(lease);
        refused = await save(lease).catch((error: unknown) => error);
      }),
    );
    await entered.opened;
    const started = performance.now();
    await a.close();
    expect(performance.now() - started).toBeGreaterThanOrEqual(graceMs - 5);
    await eventually(() => run.settled(), Boolean, 'the run settled');
    expect(reason).toBeInstanceOf(LeaseShutdownError);
    expect(refused).toBeInstanceOf(LeaseLostError);
    expect(await saves(key)).toBe(0);
    expect(await holderOf(key)).toBeUndefined();
    const next = await other.service.tryAcquire(key);
    expect(next).not.toBeNull();
    await next!.release();
  });

  test('a handle from acquire() gets the same grace: released by its user, or at the grace end', async () => {
    const a = await db.open({ owner: 'handles', timing: { shutdownGraceMs: 30_000 } });
    const kept = await a.service.acquire('drain:handle');
    const closing = track(a.close());
    await new Promise((resolve) => setTimeout(resolve, FAST.timing!.leaseTimeoutMs! * 1.5));
    expect(kept.isHeld()).toBe(true);
    expect((await holderOf('drain:handle'))?.owner).toBe('handles');
    expect(closing.settled()).toBe(false);
    await save(kept);
    await kept.release();
    await eventually(() => closing.settled(), Boolean, 'close() resolved once the handle was released');
    expect(await saves('drain:handle')).toBe(1);

    const b = await db.open({ owner: 'forgotten', timing: { shutdownGraceMs: 300 } });
    const forgotten = (await b.service.tryAcquire('drain:forgotten'))!;
    const reason = aborted(forgotten);
    await b.close();
    expect(await reason).toBeInstanceOf(LeaseShutdownError);
    expect(await holderOf('drain:forgotten')).toBeUndefined();
  });

  test('shutdownGraceMs: 0 aborts and releases a run in progress at once (the behaviour before the drain)', async () => {
    const key = 'drain:at-once';
    const a = await db.open({ owner: 'at-once', timing: { shutdownGraceMs: 0 } });
    const entered = gate();
    let reason: unknown;
    const run = track(
      a.service.run(key, async (lease) => {
        entered.open();
        reason = await aborted(lease);
      }),
    );
    await entered.opened;
    await a.close();
    await eventually(() => run.settled(), Boolean, 'the run settled');
    expect(reason).toBeInstanceOf(LeaseShutdownError);
    expect(await holderOf(key)).toBeUndefined();
  });

  test.each([
    ['the run ends within the grace', 30_000],
    ['the grace ends first', 300],
  ])('holdAtLeastMs: the tail still holds the target after the release (%s)', async (_, graceMs) => {
    const key = `drain:hold:${graceMs}`;
    const holdMs = 4_000;
    const a = await db.open({ owner: `hold-${graceMs}`, timing: { shutdownGraceMs: graceMs } });
    const entered = gate();
    const finish = gate();
    const run = track(
      a.service.run(
        key,
        async (lease) => {
          entered.open();
          await Promise.race([finish.opened, aborted(lease)]);
        },
        { holdAtLeastMs: holdMs },
      ),
    );
    await entered.opened;
    const closing = a.close();
    if (graceMs > 1_000) finish.open();
    await closing;
    await eventually(() => run.settled(), Boolean, 'the run settled');
    expect(a.service.heldLeases()).toEqual([]);
    // Released, yet within holdAtLeastMs of its acquisition (database clock) nobody may take it.
    const { rows } = await db.admin.query<{ left: number }>(
      `SELECT extract(epoch FROM acquired_at + interval '1 ms' * $2 - clock_timestamp()) * 1000 AS left
       FROM job_lease WHERE target_id = $1`,
      [key, holdMs],
    );
    expect(Number(rows[0].left)).toBeGreaterThan(500);
    expect(await other.service.tryAcquire(key)).toBeNull();
    const next = await eventually(
      () => other.service.tryAcquire(key),
      (got) => got !== null,
      'the tail to end',
      15_000,
      100,
    );
    await next!.release();
  });
});
