import { ConsoleLogger, Logger } from '@nestjs/common';
import pg from 'pg';
import { purgeFreeRows } from '../../libs/lease/src/internal.js';
import { eventually, useTestDatabase } from '../support/db.js';

/**
 * A server whose sequences stand below the tokens in its tables (issue 42 item 2): what a blue/green switchover by
 * logical replication leaves (rows copied, sequence values not), or a restore into a new cluster. One server here:
 * the sequence is set back under running services, as a process re-pointed to the new server sees it before it has
 * noticed anything (the two-server switchover itself: test/failover/bluegreen.failover-spec.ts).
 *
 * - Every statement that draws a token for a key's existing row floors it at the row's token + 1; a key's first row
 *   is floored at the purge's high-water mark: per key, no token goes back, whichever statement grants it.
 * - A bootstrap raises the sequences above the tables; tables holding tokens of a later timeline than the server's
 *   make the tokens carry that timeline (fixed), and the leases live on (no `failover`).
 */
const SEQUENCE_BITS = 47n;
const low = (token: bigint) => token & ((1n << SEQUENCE_BITS) - 1n);
const HIGH = (1n << 40n) + 10_000_000n;
const LOW = (1n << 40n) + 5n;

/** The prepared names of the acquisitions sent while `work` runs, without their configuration prefix. */
async function sent<T>(work: () => Promise<T>): Promise<{ names: string[]; result: T }> {
  const names: string[] = [];
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    const config = args[0] as { name?: string } | string;
    const name = typeof config === 'object' ? config?.name?.replace(/^lease_[0-9a-f]+(_\w\d+)*_/, '') : undefined;
    if (name && /^acquire/.test(name)) names.push(name);
    return (query as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof query;
  try {
    return { names, result: await work() };
  } finally {
    pg.Client.prototype.query = query;
  }
}

describe('tokens on a server whose sequences stand below its tables', () => {
  const db = useTestDatabase('token_floor');
  const tokenOf = async (key: string) => {
    const { rows } = await db.admin.query<{ t: string }>(
      'SELECT fencing_token::text AS t FROM job_lease WHERE target_id = $1',
      [key],
    );
    return rows[0] ? BigInt(rows[0].t) : undefined;
  };
  const setSequence = (value: bigint) => db.admin.query(`SELECT setval('job_lease_fencing_seq', $1)`, [value]);
  const lastValue = async () =>
    BigInt((await db.admin.query<{ v: string }>(`SELECT last_value::text AS v FROM job_lease_fencing_seq`)).rows[0].v);

  test('each statement that draws a token grants a key above its earlier grants, the sequence behind or not', async () => {
    const a = await db.open({ owner: 'a' });
    const b = await db.open({ owner: 'b' });
    // Grants drawn high, then the sequence set back below them (as on a new server that received the rows).
    await setSequence(HIGH);
    const burst = ['floor:batch:first', 'floor:batch:0', 'floor:batch:1', 'floor:batch:2'];
    const keys = ['floor:lone', 'floor:single', ...burst, 'floor:purged'];
    for (const key of keys) await (await a.service.tryAcquire(key))!.release();
    const slots = [
      (await a.service.tryAcquire('floor:sem', { limit: 2 }))!,
      (await a.service.tryAcquire('floor:sem', { limit: 2 }))!,
    ];
    for (const lease of slots) await lease.release();
    const before = new Map<string, bigint>();
    for (const key of keys) before.set(key, (await tokenOf(key))!);
    await db.admin.query(
      `UPDATE job_lease SET acquired_at = acquired_at - interval '2 hours' WHERE target_id = 'floor:purged'`,
    );
    expect(await purgeFreeRows(a.service)).toBe(1);
    const tableTop = BigInt(
      (await db.admin.query<{ t: string }>(`SELECT max(fencing_token)::text AS t FROM job_lease`)).rows[0].t,
    );
    await setSequence(LOW);

    // Each path: the key's token before (drawn high) and the one granted now, the sequence set back below it.
    const paths: Array<{ path: string; key: string; before: bigint; after: bigint }> = [];
    const check = (path: string, key: string, before: bigint, after: bigint) =>
      paths.push({ path, key, before, after });
    // The lone caller's statement (a released row).
    const { names: lone, result: loneLease } = await sent(() => a.service.tryAcquire('floor:lone'));
    check(lone.join(), 'floor:lone', before.get('floor:lone')!, loneLease!.fencingToken);
    // The single statement (a waiting call's attempt goes there).
    const { names: single, result: singleLease } = await sent(() =>
      b.service.acquire('floor:single', { priority: 1, onBusy: { wait: { timeoutMs: 5_000 } } }),
    );
    check(single.join(), 'floor:single', before.get('floor:single')!, singleLease.fencingToken);
    // The set-based statement: after a lone caller's call, a burst's first call goes at once, alone (the lone
    // statement), and the other calls of its turn of the event loop together.
    const { names: batched, result: batch } = await sent(() =>
      Promise.all(burst.map((key) => a.service.tryAcquire(key))),
    );
    expect(batched).toEqual(['acquire_lone', 'acquire_batch']);
    for (const lease of batch) {
      const path = lease!.targetKey === burst[0] ? "acquire_lone (a burst's first)" : 'acquire_batch';
      check(path, lease!.targetKey, before.get(lease!.targetKey)!, lease!.fencingToken);
    }
    // A purged key: its first row again, floored at the high-water mark the purge left.
    const { names: purged, result: purgedLease } = await sent(() => a.service.tryAcquire('floor:purged'));
    check(`${purged.join()} (purged)`, 'floor:purged', before.get('floor:purged')!, purgedLease!.fencingToken);
    // A semaphore's slot.
    const sem = (await a.service.tryAcquire('floor:sem', { limit: 2 }))!;
    check('semaphore', 'floor:sem', slots[sem.slot!].fencingToken, sem.fencingToken);
    // A handoff: the release grants the head of the line (the holder's token, of a new key, was not floored by a
    // row: the sequence is set back below it again).
    const held = (await a.service.tryAcquire('floor:handoff'))!;
    const waiting = b.service.acquire('floor:handoff', { priority: 1, onBusy: { wait: { timeoutMs: 5_000 } } });
    await eventually(
      () => b.service.list('floor:handoff'),
      (rows) => rows.some((row) => row.state === 'waiting'),
      'queued',
    );
    await setSequence(LOW);
    await held.release();
    const handed = await waiting;
    check('handoff', 'floor:handoff', held.fencingToken, handed.fencingToken);
    // A preemption's takeover.
    const preempted = (await a.service.tryAcquire('floor:preempt', { priority: 0 }))!;
    await setSequence(LOW);
    const urgent = await b.service.acquire('floor:preempt', {
      priority: 5,
      onBusy: { preempt: { graceMs: 0, waitTimeoutMs: 5_000 } },
    });
    check('preempt', 'floor:preempt', preempted.fencingToken, urgent.fencingToken);

    expect(paths.map(({ path }) => path)).toEqual([
      'acquire_lone',
      'acquire_or_queue',
      "acquire_lone (a burst's first)",
      'acquire_batch',
      'acquire_batch',
      'acquire_batch',
      'acquire_lone (purged)',
      'semaphore',
      'handoff',
      'preempt',
    ]);
    const back = paths.filter(({ before: was, after }) => after <= was);
    expect(back.map(({ path, key, before: was, after }) => `${path} ${key}: ${after} <= ${was}`)).toEqual([]);
    // The sequence itself stayed behind (nothing noticed a new server): the floors did it, each above its own key.
    expect(await lastValue()).toBeLessThan(low(tableTop));
    for (const lease of [loneLease, singleLease, ...batch, purgedLease, sem, handed, urgent]) await lease!.release();

    // A bootstrap raises the sequence above the tables: a new key is above every token there.
    const warnings: string[] = [];
    const quiet = () => undefined;
    Logger.overrideLogger({ log: quiet, error: quiet, warn: (message: unknown) => warnings.push(String(message)) });
    const c = await db.open({ owner: 'c' }).finally(() => Logger.overrideLogger(new ConsoleLogger()));
    const top = BigInt(
      (await db.admin.query<{ t: string }>(`SELECT max(fencing_token)::text AS t FROM job_lease`)).rows[0].t,
    );
    expect(warnings.filter((line) => /sequence "public"\."job_lease_fencing_seq" stood at/.test(line))).toHaveLength(1);
    const fresh = (await c.service.tryAcquire('floor:never-seen'))!;
    expect(fresh.fencingToken).toBeGreaterThan(top);
    await fresh.release();
  });

  test('tables holding tokens of a later timeline than the server: tokens carry it, and the leases live on', async () => {
    // Rows and a waiter place copied from a server on timeline 3 (it had failed over twice), this server on 1.
    const copied = (3n << SEQUENCE_BITS) | (HIGH + 100n);
    await db.admin.query(
      `INSERT INTO job_lease (target_id, lease_token, fencing_token, owner, lease_timeout_ms, acquired_at, updated_at)
       VALUES ('later:key', NULL, $1, 'elsewhere', 1000, now(), now())`,
      [copied.toString()],
    );
    await db.admin.query(
      `INSERT INTO job_lease_waiter (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
       VALUES ('later:line', gen_random_uuid(), 'elsewhere', 0, 600000, now(), $1, now())`,
      [((3n << SEQUENCE_BITS) | (HIGH + 200n)).toString()],
    );
    const warnings: string[] = [];
    const quiet = () => undefined;
    Logger.overrideLogger({ log: quiet, error: quiet, warn: (message: unknown) => warnings.push(String(message)) });
    const a = await db.open({ owner: 'later' }).finally(() => Logger.overrideLogger(new ConsoleLogger()));
    const lost: string[] = [];
    let renewals = 0;
    a.service.events$.subscribe((event) => {
      if (event.type === 'lost') lost.push(event.reason);
      if (event.type === 'renewed') renewals++;
    });
    const again = (await a.service.tryAcquire('later:key'))!;
    const fresh = (await a.service.tryAcquire('later:new'))!;
    expect([again.fencingToken >> SEQUENCE_BITS, fresh.fencingToken >> SEQUENCE_BITS]).toEqual([3n, 3n]);
    expect(again.fencingToken).toBeGreaterThan(copied);
    expect(fresh.fencingToken).toBeGreaterThan(copied);
    expect(warnings.filter((line) => /tokens of timeline 3, later than this server's \(1\)/.test(line))).toHaveLength(
      1,
    );
    await eventually(
      () => renewals,
      (n) => n >= 4,
      'renewals of both',
    );
    expect(lost).toEqual([]);
    expect(await again.fenced(async () => 'written')).toBe('written');
    // A place taken now is behind the copied one. The wait ends when the test has seen the line (a short wait of its
    // own could end before its row is read on a loaded machine: seen in a full run at load 8).
    const seen = new AbortController();
    const waiting = a.service
      .acquire('later:line', { priority: 0, onBusy: { wait: { timeoutMs: 60_000 } }, signal: seen.signal })
      .catch(() => undefined);
    const { rows: line } = await eventually(
      () =>
        db.admin.query<{ owner: string }>(
          `SELECT owner FROM job_lease_waiter WHERE target_id = 'later:line' ORDER BY seq`,
        ),
      (result) => result.rows.length === 2,
      'the second waiter queued',
    );
    seen.abort();
    expect(line.map((row) => row.owner)).toEqual(['elsewhere', expect.stringContaining('later')]);
    await waiting;
    await again.release();
    await fresh.release();
  });
});
