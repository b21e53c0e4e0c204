import { randomBytes } from 'node:crypto';
import {
  type Lease,
  type LeaseEvent,
  LeaseArgumentError,
  LeaseKeyError,
  LeaseLimitConflictError,
  LeaseLostError,
} from 'nest-pg-lease';
import { LeaseMetrics } from 'nest-pg-lease/prometheus';
import pg from 'pg';
import { Registry } from 'prom-client';
import { interceptHeadWakeups, LeaseStore, resolveLeaseOptions } from '../../libs/lease/src/internal.js';
import { eventually, type OpenedService, useTestDatabase } from '../support/db.js';

/**
 * Semaphores (`limit`): up to n holders of one key, each slot a lease of its own (token, fencing token, heartbeat,
 * fenced writes, loss and takeover), the (n + 1)-th refused or waiting in the key's one priority line.
 */
/**
 * The slot attempts (`WITH key_slots …`) the connections named `applicationName` have had answered from now on: the
 * services run in this Jest process, so a wrapper of pg's client sees their statements and answers.
 */
function slotAttemptsOf(applicationName: string): { readonly answered: number; stop(): void } {
  const original = pg.Client.prototype.query;
  const counter = { answered: 0, stop: () => void (pg.Client.prototype.query = original) };
  pg.Client.prototype.query = function (this: pg.Client, config: unknown, ...rest: unknown[]) {
    const text = typeof config === 'string' ? config : (config as { text?: string })?.text;
    const from = (this as { connectionParameters?: { application_name?: string } }).connectionParameters
      ?.application_name;
    const result = (original as (...args: unknown[]) => unknown).call(this, config, ...rest);
    if (from === applicationName && text?.trimStart().startsWith('WITH key_slots')) {
      // The library hands pg a query object of its own (answered by its 'end' event); a config object, a promise.
      if (result instanceof Promise)
        result.then(
          () => counter.answered++,
          () => undefined,
        );
      else (result as pg.Query).once('end', () => counter.answered++);
    }
    return result;
  } as typeof original;
  return counter;
}

describe('semaphores (limit)', () => {
  const db = useTestDatabase('semaphore');
  let a: OpenedService;
  let b: OpenedService;

  beforeAll(async () => {
    a = await db.open({ owner: 'a' });
    // Waiters of b hear releases by NOTIFY; its poll is slow, so a grant that comes at once came from the NOTIFY.
    b = await db.open({ owner: 'b', timing: { waitPollIntervalMs: 20_000, waiterTimeoutMs: 30_000 } });
  });

  const slotRows = async (key: string) =>
    (
      await db.admin.query<{ slot: number; owner: string; slot_limit: number }>(
        `SELECT slot, owner, slot_limit FROM job_lease
         WHERE target_id = $1 AND slot > 0 AND lease_token IS NOT NULL ORDER BY slot`,
        [key],
      )
    ).rows;

  test('tryAcquire: n holders at once, each a lease of its own slot; the (n + 1)-th is refused', async () => {
    const key = 'sem:try';
    const held = [
      (await a.service.tryAcquire(key, { limit: 3 }))!,
      (await b.service.tryAcquire(key, { limit: 3 }))!,
      (await a.service.tryAcquire(key, { limit: 3 }))!,
    ];
    expect(held.map((lease) => lease.slot)).toEqual([0, 1, 2]);
    expect(held.every((lease) => lease.targetKey === key && lease.isHeld())).toBe(true);
    expect(new Set(held.map((lease) => lease.token)).size).toBe(3);
    expect(new Set(held.map((lease) => lease.fencingToken)).size).toBe(3);
    expect(await b.service.tryAcquire(key, { limit: 3 })).toBeNull();
    expect((await slotRows(key)).map((row) => [row.owner, row.slot_limit])).toEqual([
      ['a', 3],
      ['b', 3],
      ['a', 3],
    ]);
    // A freed slot is the next caller's, with a larger fencing token than that slot's earlier grant.
    await held[1].release();
    const next = (await b.service.tryAcquire(key, { limit: 3 }))!;
    expect(next.slot).toBe(1);
    expect(next.fencingToken).toBeGreaterThan(held[1].fencingToken);
    await Promise.all([held[0], held[2], next].map((lease) => lease.release()));
    expect(await slotRows(key)).toEqual([]);
  });

  test('each slot renews and writes fenced on its own row; list() shows the slots', async () => {
    const key = 'sem:fenced';
    const [x, y] = [(await a.service.tryAcquire(key, { limit: 2 }))!, (await b.service.tryAcquire(key, { limit: 2 }))!];
    const before = await db.admin.query(`SELECT slot, updated_at FROM job_lease WHERE lease_token IS NOT NULL
      AND target_id = 'sem:fenced' ORDER BY slot`);
    await eventually(
      () =>
        db.admin.query(
          `SELECT count(*)::int AS n FROM job_lease WHERE target_id = 'sem:fenced'
          AND lease_token IS NOT NULL AND updated_at > $1`,
          [before.rows[1].updated_at],
        ),
      (result) => result.rows[0].n === 2,
      'both slots renewed',
    );
    expect(await x.fenced(async (manager) => (await manager.query('SELECT 1 AS one'))[0].one)).toBe(1);
    expect(await y.fenced(async () => 'y')).toBe('y');
    const listed = (await a.service.list(key)).filter((row) => row.state === 'held');
    expect(listed.map((row) => [row.targetKey, row.slot, row.owner, row.fencingToken])).toEqual([
      [key, 0, 'a', x.fencingToken],
      [key, 1, 'b', y.fencingToken],
    ]);
    const all = (await a.service.list()).filter((row) => row.targetKey === key);
    expect(all.map((row) => row.slot)).toEqual([0, 1]);
    await x.release();
    await y.fenced(async () => undefined, { release: true });
    expect(await slotRows(key)).toEqual([]);
  });

  test('events carry the slot; lease_slots_held counts the slots held per key template', async () => {
    const registry = new Registry();
    const metrics = new LeaseMetrics(a.service, { registry });
    const events: LeaseEvent[] = [];
    const sub = a.service.events$.subscribe((event) => events.push(event));
    try {
      const options = { limit: 2, keyTemplate: 'sem:metrics:{id}' };
      const held = [
        (await a.service.tryAcquire('sem:metrics:1', options))!,
        (await a.service.tryAcquire('sem:metrics:1', options))!,
      ];
      const gauge = () => registry.getSingleMetricAsString('lease_slots_held');
      expect(await gauge()).toContain('lease_slots_held{key_template="sem:metrics:{id}"} 2');
      await held[0].release();
      expect(await gauge()).toContain('lease_slots_held{key_template="sem:metrics:{id}"} 1');
      await held[1].release();
      expect(await gauge()).toContain('lease_slots_held{key_template="sem:metrics:{id}"} 0');
      const slotted = events.filter((event) => event.type === 'acquired' || event.type === 'released');
      expect(slotted.map((event) => [event.type, 'slot' in event ? event.slot : undefined])).toEqual([
        ['acquired', 0],
        ['acquired', 1],
        ['released', 0],
        ['released', 1],
      ]);
    } finally {
      sub.unsubscribe();
      metrics.close();
    }
  });

  test('waiters queue in the key’s one line: by priority, first come first served, woken by a slot’s release', async () => {
    const key = 'sem:wait';
    const holders = [
      (await a.service.tryAcquire(key, { limit: 2 }))!,
      (await a.service.tryAcquire(key, { limit: 2 }))!,
    ];
    const order: string[] = [];
    const wait = (name: string, priority: number) =>
      b.service.acquire(key, { limit: 2, priority, onBusy: { wait: { timeoutMs: 15_000 } } }).then((lease) => {
        order.push(name);
        return lease;
      });
    const low = wait('low', 1);
    await eventually(
      () => a.service.list(key),
      (rows) => rows.some((row) => row.state === 'waiting'),
      'low queued',
    );
    const highFirst = wait('high-1', 5);
    await eventually(
      () => a.service.list(key),
      (rows) => rows.filter((r) => r.state === 'waiting').length === 2,
      'q',
    );
    const highSecond = wait('high-2', 5);
    await eventually(
      () => a.service.list(key),
      (rows) => rows.filter((r) => r.state === 'waiting').length === 3,
      'q',
    );
    const started = performance.now();
    await holders[0].release();
    const first = await highFirst;
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(first.slot).toBe(0);
    await holders[1].release();
    const second = await highSecond;
    expect(order).toEqual(['high-1', 'high-2']);
    await first.release();
    const third = await low;
    expect(order).toEqual(['high-1', 'high-2', 'low']);
    await Promise.all([second.release(), third.release()]);
  });

  test('a slot released by its last save (fenced, release: true) wakes the key’s next waiter', async () => {
    const key = 'sem:save-release';
    const holders = [
      (await a.service.tryAcquire(key, { limit: 2 }))!,
      (await a.service.tryAcquire(key, { limit: 2 }))!,
    ];
    const waiting = b.service.acquire(key, { limit: 2, priority: 1, onBusy: { wait: { timeoutMs: 15_000 } } });
    await eventually(
      () => a.service.list(key),
      (rows) => rows.some((row) => row.state === 'waiting'),
      'queued',
    );
    const started = performance.now();
    await holders[1].fenced(async () => undefined, { release: true });
    const granted = await waiting;
    // b's poll is 20 s: the commit's NOTIFY woke it.
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(granted.slot).toBe(1);
    await Promise.all([granted.release(), holders[0].release()]);
  });

  test('no barging: a newcomer never takes the slot a live waiter ahead of it is due', async () => {
    const key = 'sem:barging';
    const holders = [
      (await a.service.tryAcquire(key, { limit: 2 }))!,
      (await a.service.tryAcquire(key, { limit: 2 }))!,
    ];
    // A process whose waiter hears nothing (wake-ups dropped, poll slow): it stays queued while a slot is free. One
    // statement connection, named after an owner no other file has (its connections too), so `untilAsleep` can watch it.
    const owner = `c-${randomBytes(3).toString('hex')}`;
    const c = await db.open(
      { owner, connections: { poolSize: 1 }, timing: { waitPollIntervalMs: 60_000, waiterTimeoutMs: 30_000 } },
      owner,
    );
    const woken: string[] = [];
    interceptHeadWakeups(c.service, (wakeup) => woken.push(wakeup.waiterId));
    const attempts = slotAttemptsOf(`${owner}:statements`);
    const stop = new AbortController();
    const waiting = c.service.acquire(key, {
      limit: 2,
      priority: 1,
      onBusy: { wait: { timeoutMs: 30_000 } },
      signal: stop.signal,
    });
    // Queued, and its first attempt as a waiter over (its second slot attempt answered: the one that queued it, then
    // its first as a waiter): were that attempt still to come after the release, the waiter (the head of the line)
    // would rightly take the freed slot itself.
    await eventually(
      () => attempts.answered,
      (n) => n >= 2,
      'the waiter asleep after its first attempt in line',
    );
    attempts.stop();
    await holders[0].release();
    await eventually(
      () => woken,
      (ids) => ids.length > 0,
      'the release to name the waiter',
    );
    expect(await a.service.tryAcquire(key, { limit: 2, priority: 1 })).toBeNull();
    expect(await a.service.tryAcquire(key, { limit: 2 })).toBeNull();
    // A higher priority passes the waiter, as on a single holder's key.
    const urgent = (await a.service.tryAcquire(key, { limit: 2, priority: 9 }))!;
    expect(urgent.slot).toBe(0);
    await urgent.release();
    stop.abort();
    await expect(waiting).rejects.toBeDefined();
    expect((await a.service.list(key)).filter((row) => row.state === 'waiting')).toEqual([]);
    await holders[1].release();
  });

  test('two limits for one key: LeaseLimitConflictError, whichever asks second', async () => {
    const key = 'sem:conflict';
    const four = await Promise.all([0, 1, 2, 3].map(() => a.service.tryAcquire(key, { limit: 4 })));
    const error = await b.service.tryAcquire(key, { limit: 2 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseLimitConflictError);
    expect(error).toMatchObject({ targetKey: key, limit: 2, heldLimit: 4 });
    // Holders left only in slots the smaller limit does not reach: the recorded limit still shows them.
    await four[0]!.release();
    await four[1]!.release();
    await expect(b.service.tryAcquire(key, { limit: 2 })).rejects.toBeInstanceOf(LeaseLimitConflictError);
    await expect(b.service.acquire(key, { limit: 8, onBusy: { wait: { timeoutMs: 1_000 } } })).rejects.toMatchObject({
      name: 'LeaseLimitConflictError',
      heldLimit: 4,
    });
    await four[2]!.release();
    await four[3]!.release();
    // Once nobody holds the key, another limit may take it over.
    const two = (await b.service.tryAcquire(key, { limit: 2 }))!;
    expect(two.slot).toBe(0);
    await two.release();
    // A single holder of the key is limit 1.
    const single = (await a.service.tryAcquire(key))!;
    await expect(b.service.tryAcquire(key, { limit: 2 })).rejects.toMatchObject({ heldLimit: 1, limit: 2 });
    await single.release();
  });

  test('the Solid Queue failure: a stale release after a takeover never frees the new holder’s slot', async () => {
    // rails/solid_queue#761: a pruned worker's stale execution released the semaphore a second time, and a limit-1
    // job ran many times at once. Here each slot is a row with a lease token: a stale token matches nothing.
    const key = 'sem:stale';
    const stale = (await a.service.tryAcquire(key, { limit: 2 }))!;
    const other = (await b.service.tryAcquire(key, { limit: 2 }))!;
    const staleRow = { targetKey: key, slot: stale.slot! + 1 };
    // The stale holder's row expires (a holder paused past its timeout), and another caller takes its slot over.
    await db.admin.query(
      `UPDATE job_lease SET updated_at = updated_at - interval '1 hour' WHERE target_id = $1 AND slot = $2`,
      [staleRow.targetKey, staleRow.slot],
    );
    const events: LeaseEvent[] = [];
    const sub = b.service.events$.subscribe((event) => events.push(event));
    const taker = (await b.service.tryAcquire(key, { limit: 2 }))!;
    sub.unsubscribe();
    expect(taker.slot).toBe(stale.slot);
    expect(taker.fencingToken).toBeGreaterThan(stale.fencingToken);
    expect(events.find((event) => event.type === 'taken-over')).toMatchObject({ slot: stale.slot, targetKey: key });
    // The stale release, through the service and as a raw statement with the stale token (a pruned worker's): no row
    // changes, the slot stays the taker's, and the key still has no free slot.
    await stale.release();
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    try {
      const raw = new LeaseStore(pool, pool, resolveLeaseOptions({}));
      expect(await raw.release(staleRow, stale.token, 1_000)).toBe(false);
      expect(await raw.release(staleRow, stale.token, 1_000)).toBe(false);
    } finally {
      await pool.end();
    }
    expect((await slotRows(key)).map((row) => row.owner)).toEqual(['b', 'b']);
    expect(taker.isHeld()).toBe(true);
    expect(await a.service.tryAcquire(key, { limit: 2 })).toBeNull();
    // Nor can the stale holder write: its fenced work never runs.
    let ran = false;
    await expect(stale.fenced(async () => (ran = true))).rejects.toBeInstanceOf(LeaseLostError);
    expect(ran).toBe(false);
    await taker.fenced(async () => undefined);
    await Promise.all([taker.release(), other.release()]);
  });

  test('input: limit is an integer 1 … 1000; a limited key is any key (255 bytes, U+001F included)', async () => {
    for (const limit of [0, 1.5, 1001, '2']) {
      await expect(a.service.tryAcquire('sem:input', { limit: limit as number })).rejects.toBeInstanceOf(
        LeaseArgumentError,
      );
    }
    await expect(a.service.tryAcquire('x'.repeat(256), { limit: 2 })).rejects.toBeInstanceOf(LeaseKeyError);
    const long = (await a.service.tryAcquire('x'.repeat(255), { limit: 2 }))!;
    expect(long.slot).toBe(0);
    await long.release();
    // A slot is a column of the row, not a suffix of the key: `sem:us\u001f1` is a key of its own, and a single
    // holder of it is no holder of slot 1 of `sem:us` (before the slot column, that slot's row had that name).
    const slots = [
      (await a.service.tryAcquire('sem:us', { limit: 2 }))!,
      (await b.service.tryAcquire('sem:us', { limit: 2 }))!,
    ];
    const lookalikes = [(await a.service.tryAcquire('sem:us\u001f0'))!, (await b.service.tryAcquire('sem:us\u001f1'))!];
    expect(lookalikes.map((lease) => [lease.targetKey, lease.slot])).toEqual([
      ['sem:us\u001f0', undefined],
      ['sem:us\u001f1', undefined],
    ]);
    expect(await a.service.tryAcquire('sem:us', { limit: 2 })).toBeNull();
    expect((await a.service.list('sem:us')).map((row) => [row.targetKey, row.slot])).toEqual([
      ['sem:us', 0],
      ['sem:us', 1],
    ]);
    expect((await a.service.list('sem:us\u001f1')).map((row) => [row.targetKey, row.slot, row.owner])).toEqual([
      ['sem:us\u001f1', undefined, 'b'],
    ]);
    await Promise.all([...slots, ...lookalikes].map((lease) => lease.release()));
    const limited = (await a.service.tryAcquire('sem\u001f0', { limit: 3 }))!;
    expect(limited.slot).toBe(0);
    await limited.release();
    await expect(
      a.service.run('sem:join', async () => 1, { limit: 2, onBusy: 'join' } as never),
    ).rejects.toBeInstanceOf(LeaseArgumentError);
    // limit 1 is the single holder: the key's own row.
    const single = (await a.service.tryAcquire('sem:one', { limit: 1 }))!;
    expect(single.slot).toBeUndefined();
    expect((await db.admin.query(`SELECT slot FROM job_lease WHERE target_id = 'sem:one'`)).rows).toEqual([
      { slot: 0 },
    ]);
    await single.release();
  });

  test('run holds a slot for the work; n runs at once, the next waits its turn', async () => {
    const key = 'sem:run';
    let running = 0;
    let most = 0;
    const work = async (lease: Lease) => {
      running++;
      most = Math.max(most, running);
      await new Promise((resolve) => setTimeout(resolve, 150));
      running--;
      return lease.slot;
    };
    const slots = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        (i % 2 ? a : b).service.run(key, work, { limit: 3, onBusy: { wait: { timeoutMs: 10_000 } } }),
      ),
    );
    expect(most).toBe(3);
    expect(slots.every((slot) => slot !== undefined && slot >= 0 && slot < 3)).toBe(true);
  });
});
