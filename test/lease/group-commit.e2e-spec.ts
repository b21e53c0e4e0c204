/**
 * Client-side group commit (issue 14): acquisitions and releases queued behind one in flight go together in one
 * statement and one commit, with every caller's own outcome. Batches are formed deterministically: a call on a
 * `slow:` key is held inside PostgreSQL by a trigger that sleeps for those keys only (the batch in flight), and the
 * calls made meanwhile queue and go together when it returns.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import {
  ownRow,
  resolveLeaseOptions,
  LeaseStore,
  type AcquireRequest,
  type AcquiredRow,
  type Refusal,
} from '../../libs/lease/src/internal.js';
import type { LeaseModuleOptions } from 'nest-pg-lease';
import { adminClient, eventually, useTestDatabase } from '../support/db.js';

const SLOW_MS = 400;
/** Far longer than the group commit's stall bound (min(heartbeatIntervalMs, 1 s)). */
const STALL_MS = 6_000;

function request(targetKey: string, extra: Partial<AcquireRequest> = {}): AcquireRequest {
  return { targetKey, leaseToken: randomUUID(), priority: 0, holdMs: 0, ...extra };
}

const won = (outcome: AcquiredRow | Refusal): outcome is AcquiredRow => !('refused' in outcome);

describe('group commit', () => {
  const db = useTestDatabase('groupcommit');
  let pool: pg.Pool;
  db.beforeDrop(() => pool?.end());

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: db.url, max: 8 });
    await new LeaseStore(pool, pool, resolveLeaseOptions({})).schema.createSchema();
    // Holds the statement that writes a `slow:` key (acquire or release) inside PostgreSQL; fails one that writes a
    // `bad:` key (a per-row error); other keys pass.
    await db.admin.query(`CREATE FUNCTION gc_stall() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.target_id LIKE 'slow:%' THEN PERFORM pg_sleep(${SLOW_MS / 1000}); END IF;
        IF NEW.target_id LIKE 'stall:%' THEN PERFORM pg_sleep(${STALL_MS / 1000}); END IF;
        IF NEW.target_id LIKE 'bad:%' THEN RAISE EXCEPTION 'bad row %', NEW.target_id USING ERRCODE = 'P0001'; END IF;
        RETURN NEW;
      END $$`);
    await db.admin.query(`CREATE TRIGGER gc_stall BEFORE INSERT OR UPDATE ON job_lease
      FOR EACH ROW EXECUTE FUNCTION gc_stall()`);
  });

  function store(options: LeaseModuleOptions = {}) {
    return new LeaseStore(pool, pool, resolveLeaseOptions(options));
  }

  /** Occupies the batch slot of `s` with a slow acquisition, then runs `queued` while it is in flight. */
  /** Lets the calls made so far go: an idle queue sends at the end of the current turn of the event loop. */
  const sent = () => new Promise((resolve) => setImmediate(resolve));

  async function behindStall<T>(s: LeaseStore, queued: () => Promise<T>): Promise<T> {
    const stalled = s.tryAcquire(request(`slow:${randomUUID()}`));
    await sent();
    const result = queued();
    await stalled;
    return result;
  }

  test('a lone call is sent at once, alone: no added latency when idle', async () => {
    const s = store();
    const outcome = await s.tryAcquire(request('lone:a'));
    expect(won(outcome)).toBe(true);
    expect(s.batchStats.acquire).toMatchObject({ batches: 1, items: 1, largest: 1 });
    // One after the other (never overlapping): still every call alone.
    const second = await s.tryAcquire(request('lone:b'));
    expect(won(second)).toBe(true);
    expect(s.batchStats.acquire).toMatchObject({ batches: 2, items: 2, largest: 1 });
  });

  test('calls made in the same turn of the event loop go together even when nothing is in flight', async () => {
    const s = store();
    const keys = Array.from({ length: 5 }, (_, i) => `turn:${i}`);
    const outcomes = await Promise.all(keys.map((key) => s.tryAcquire(request(key))));
    expect(outcomes.every(won)).toBe(true);
    // One statement for all five (not the first alone, then the other four behind it).
    expect(s.batchStats.acquire).toMatchObject({ batches: 1, items: 5, largest: 5 });
  });

  test('calls made while batches are in flight go in one statement, each with its own fencing token', async () => {
    const s = store();
    // Half of the keys have a released row already (the token is drawn in the UPDATE), half are new (INSERT).
    const old = Array.from({ length: 10 }, (_, i) => `batch:old:${i}`);
    for (const key of old) {
      const first = (await s.tryAcquire(request(key))) as AcquiredRow;
      expect(won(first)).toBe(true);
    }
    await db.admin.query(`UPDATE job_lease SET lease_token = NULL WHERE target_id LIKE 'batch:old:%'`);
    const { rows: before } = await db.admin.query<{ max: string }>(
      `SELECT max(fencing_token)::text AS max FROM job_lease`,
    );
    const keys = [...old, ...Array.from({ length: 10 }, (_, i) => `batch:new:${i}`)];
    const outcomes = await behindStall(s, () => Promise.all(keys.map((key) => s.tryAcquire(request(key)))));
    expect(s.batchStats.acquire.largest).toBe(keys.length);
    expect(outcomes.every(won)).toBe(true);
    const tokens = (outcomes as AcquiredRow[]).map((outcome) => outcome.fencingToken);
    expect(new Set(tokens).size).toBe(keys.length);
    for (const token of tokens) expect(token).toBeGreaterThan(BigInt(before[0].max));
    // The database agrees: each key's row carries the token its caller was given.
    const { rows } = await db.admin.query<{ target_id: string; fencing_token: string }>(
      `SELECT target_id, fencing_token::text FROM job_lease WHERE target_id LIKE 'batch:%'`,
    );
    const byKey = new Map(rows.map((row) => [row.target_id, BigInt(row.fencing_token)]));
    keys.forEach((key, i) => expect(byKey.get(key)).toBe(tokens[i]));
  });

  test('a duplicate key inside one batch resolves to exactly one winner (new key and released row)', async () => {
    const s = store();
    const released = (await s.tryAcquire(request('dup:released'))) as AcquiredRow;
    await db.admin.query(`UPDATE job_lease SET lease_token = NULL WHERE target_id = 'dup:released'`);
    expect(won(released)).toBe(true);
    const requests = [
      ...Array.from({ length: 6 }, () => request('dup:new')),
      ...Array.from({ length: 6 }, () => request('dup:released')),
    ];
    const outcomes = await behindStall(s, () => Promise.all(requests.map((r) => s.tryAcquire(r))));
    expect(s.batchStats.acquire.largest).toBe(requests.length);
    for (const key of ['dup:new', 'dup:released']) {
      const winners = requests.flatMap((r, i) => (r.targetKey === key && won(outcomes[i]) ? [r] : []));
      expect(winners).toHaveLength(1);
      const { rows } = await db.admin.query(`SELECT lease_token::text FROM job_lease WHERE target_id = $1`, [key]);
      expect(rows[0].lease_token).toBe(winners[0].leaseToken);
    }
  });

  test('one bad row never fails the others: its caller alone gets the error', async () => {
    const s = store();
    const requests = [request('good:1'), request(`bad:${randomUUID()}`), request('good:2'), request('x'.repeat(300))];
    const settled = await behindStall(s, () => Promise.allSettled(requests.map((r) => s.tryAcquire(r))));
    expect(s.batchStats.acquire.largest).toBe(requests.length);
    expect(s.batchStats.acquire.splits).toBe(1);
    expect(settled[0]).toMatchObject({ status: 'fulfilled', value: { fencingToken: expect.any(BigInt) } });
    expect(settled[1]).toMatchObject({ status: 'rejected', reason: { code: 'P0001' } });
    expect(settled[2]).toMatchObject({ status: 'fulfilled', value: { fencingToken: expect.any(BigInt) } });
    // 300 bytes violates the key's CHECK (LeaseService refuses such a key before any SQL; the store must still cope).
    expect(settled[3]).toMatchObject({ status: 'rejected', reason: { code: '23514' } });
  });

  test('batch size is bounded by maxBatchSize', async () => {
    const s = store({ connections: { maxBatchSize: 4 } });
    const keys = Array.from({ length: 21 }, (_, i) => `bounded:${i}`);
    const outcomes = await behindStall(s, () => Promise.all(keys.map((key) => s.tryAcquire(request(key)))));
    expect(outcomes.every(won)).toBe(true);
    expect(s.batchStats.acquire.largest).toBe(4);
    expect(s.batchStats.acquire.items).toBe(keys.length + 1);
  });

  test('a stalled batch stops holding back the calls queued behind it (independence)', async () => {
    const s = store();
    let stalledDone = false;
    const stalled = s.tryAcquire(request(`stall:${randomUUID()}`)).finally(() => (stalledDone = true));
    await sent();
    const started = performance.now();
    const fast = await s.tryAcquire(request('unstalled'));
    const waitedMs = performance.now() - started;
    expect(won(fast)).toBe(true);
    // Served once the stall bound passed, long before the stalled statements return (they still run in PostgreSQL).
    expect(stalledDone).toBe(false);
    const { rows } = await db.admin.query(`SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event = 'PgSleep'`);
    expect(rows[0].n).toBe(1);
    console.log(`call queued behind a stalled batch served after ${waitedMs.toFixed(0)} ms`);
    expect(won(await stalled)).toBe(true);
  });

  test('maxBatchSize 1 sends every call alone', async () => {
    const s = store({ connections: { maxBatchSize: 1 } });
    const keys = Array.from({ length: 5 }, (_, i) => `unbatched:${i}`);
    const outcomes = await Promise.all(keys.map((key) => s.tryAcquire(request(key))));
    expect(outcomes.every(won)).toBe(true);
    expect(s.batchStats.acquire.batches).toBe(0);
  });

  test('a batch refuses held keys and honours a live waiter ahead, writing nothing for them', async () => {
    const s = store();
    await s.tryAcquire(request('rules:held'));
    await s.waiters.enqueue('rules:queued', randomUUID(), 5, undefined, 5_000);
    const requests = [request('rules:held'), request('rules:queued', { priority: 1 }), request('rules:free')];
    const outcomes = await behindStall(s, () => Promise.all(requests.map((r) => s.tryAcquire(r))));
    expect(s.batchStats.acquire.largest).toBe(3);
    expect(outcomes.map(won)).toEqual([false, false, true]);
    const { rows } = await db.admin.query(`SELECT count(*)::int AS n FROM job_lease WHERE target_id = 'rules:queued'`);
    expect(rows[0].n).toBe(0);
  });

  test('an expired row is taken over by a batch, with the previous owner reported', async () => {
    const s = store();
    await store({ owner: 'gone-owner' }).tryAcquire(request('takeover:a'));
    await db.admin.query(
      `UPDATE job_lease SET updated_at = updated_at - interval '1 hour' WHERE target_id = 'takeover:a'`,
    );
    const [outcome] = await behindStall(s, () =>
      Promise.all([s.tryAcquire(request('takeover:a')), s.tryAcquire(request('takeover:b'))]),
    );
    expect(s.batchStats.acquire.largest).toBe(2);
    expect(outcome).toMatchObject({ tookOver: true, previousOwner: 'gone-owner' });
  });

  test('a row locked by another transaction costs only its own caller: the rest of the batch goes on', async () => {
    const s = store();
    await s.tryAcquire(request('locked:a'));
    await db.admin.query(`UPDATE job_lease SET lease_token = NULL WHERE target_id = 'locked:a'`);
    const locker = await adminClient(db.url);
    try {
      await locker.query('BEGIN');
      await locker.query(`SELECT 1 FROM job_lease WHERE target_id = 'locked:a' FOR UPDATE`);
      let lockedDone = false;
      const [lockedCall, others] = await behindStall(s, () => {
        const lockedCall = s.tryAcquire(request('locked:a')).finally(() => (lockedDone = true));
        const others = Promise.all([s.tryAcquire(request('locked:b')), s.tryAcquire(request('locked:c'))]);
        return Promise.resolve([lockedCall, others] as const);
      });
      expect((await others).every(won)).toBe(true);
      expect(lockedDone).toBe(false);
      // Its caller waits for the lock alone (the single statement), and wins once it is free.
      await locker.query('COMMIT');
      expect(won(await lockedCall)).toBe(true);
    } finally {
      await locker.end();
    }
  });

  test('releases queued behind one in flight go in one statement; a stale token releases nothing', async () => {
    const s = store();
    const keys = Array.from({ length: 8 }, (_, i) => `rel:${i}`);
    const slowKeys = [`slow:${randomUUID()}`];
    const leases = (await Promise.all(
      [...slowKeys, ...keys].map((key) => s.tryAcquire(request(key))),
    )) as AcquiredRow[];
    expect(leases.every(won)).toBe(true);
    const tokens = new Map(
      (
        await db.admin.query<{ target_id: string; lease_token: string }>(
          `SELECT target_id, lease_token::text FROM job_lease`,
        )
      ).rows.map((row) => [row.target_id, row.lease_token]),
    );
    const stalled = slowKeys.map((key) => s.release(ownRow(key), tokens.get(key)!, 5_000));
    await sent();
    const released = await Promise.all([
      ...keys.map((key) => s.release(ownRow(key), tokens.get(key)!, 5_000)),
      s.release(ownRow('rel:0'), randomUUID(), 5_000),
    ]);
    expect(await Promise.all(stalled)).toEqual([true]);
    expect(s.batchStats.release.largest).toBe(keys.length + 1);
    expect(released).toEqual([...keys.map(() => true), false]);
    const { rows } = await db.admin.query(`SELECT count(*)::int AS n FROM job_lease WHERE lease_token IS NOT NULL
      AND target_id LIKE 'rel:%'`);
    expect(rows[0].n).toBe(0);
  });

  test('a release names only the next waiter in its NOTIFY (head-only handoff)', async () => {
    const s = store();
    const listener = await adminClient(db.url);
    const heard: Array<{ channel: string; payload?: string }> = [];
    listener.on('notification', (message) => heard.push({ channel: message.channel, payload: message.payload }));
    try {
      await listener.query(`LISTEN job_lease_next; LISTEN job_lease_wake`);
      const lease = (await s.tryAcquire(request('head:a'))) as AcquiredRow;
      expect(won(lease)).toBe(true);
      const low = randomUUID();
      const high = randomUUID();
      const later = randomUUID();
      await s.waiters.enqueue('head:a', low, 0, undefined, 5_000);
      await s.waiters.enqueue('head:a', high, 7, undefined, 5_000);
      await s.waiters.enqueue('head:a', later, 7, undefined, 5_000);
      const { rows } = await db.admin.query(`SELECT lease_token::text FROM job_lease WHERE target_id = 'head:a'`);
      expect(await s.release(ownRow('head:a'), rows[0].lease_token, 5_000)).toBe(true);
      await eventually(
        () => heard.length,
        (n) => n >= 1,
        'the NOTIFY',
      );
      // The grant travels with it (direct handoff): `<waiter id>/<fencing token> <key>`.
      expect(heard).toEqual([{ channel: 'job_lease_next', payload: expect.stringMatching(`^${high}/\\d+ head:a$`) }]);
      // The head gives up with its grant unconfirmed: the grant goes on, and the NOTIFY names the new head only.
      await s.waiters.dequeue('head:a', high);
      await eventually(
        () => heard.length,
        (n) => n >= 2,
        'the second NOTIFY',
      );
      expect(heard[1]).toEqual({ channel: 'job_lease_next', payload: expect.stringMatching(`^${later}/\\d+ head:a$`) });
    } finally {
      await listener.end();
    }
  });
});
