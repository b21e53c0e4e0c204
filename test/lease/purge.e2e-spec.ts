/**
 * The purge of free rows (issue 25 part 3): keys that come and go (`order:{uuid}`) must not grow the lease table for
 * ever, and no token may go back for it. The stall is aimed: a trigger that sleeps inside PostgreSQL for one owner's
 * insert only, after that acquisition drew its token and before its row exists.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { eventually, useTestDatabase } from '../support/db.js';
import {
  LeaseStore,
  ownRow,
  purgeFreeRows,
  resolveLeaseOptions,
  mergeLeaseOptions,
} from '../../libs/lease/src/internal.js';

const STALL_MS = 4_000;
/** The purge bound of the test stores: the acquisitions' run cap is half of it (1.5 s), below the stall. */
const PURGE_AFTER_MS = 3_000;

describe('purging free rows', () => {
  const db = useTestDatabase('purge', 'read committed', async (admin) => {
    await admin.query(`CREATE FUNCTION stall_insert() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.owner = 'stalled' THEN PERFORM pg_sleep(${STALL_MS / 1000}); END IF; RETURN NEW; END $$`);
  });
  let pool: pg.Pool;
  db.beforeDrop(() => pool?.end());
  // Long enough that statement_timeout (the acquisition bound, 18 s) is not what ends the stalled statement.
  const timings = { timing: { heartbeatIntervalMs: 2_000, leaseTimeoutMs: 20_000 } };
  const store = (owner: string, purgeAfterMs = PURGE_AFTER_MS) =>
    new LeaseStore(
      pool,
      pool,
      resolveLeaseOptions(mergeLeaseOptions(timings, { owner, connections: { maxBatchSize: 1 } })),
      pool,
      purgeAfterMs,
    );
  const request = (targetKey: string) => ({ targetKey, leaseToken: randomUUID(), priority: 0, holdMs: 0 });

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: db.url, max: 6 });
    await store('owner').schema.createSchema();
    await db.admin.query(`CREATE TRIGGER stall_insert BEFORE INSERT ON job_lease
      FOR EACH ROW EXECUTE FUNCTION stall_insert()`);
  });

  const sleeping = async () =>
    (
      await db.admin.query(
        `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'`,
      )
    ).rows.length;

  const tokenOf = async (key: string) => {
    const { rows } = await db.admin.query<{ t: string }>(
      'SELECT fencing_token::text AS t FROM job_lease WHERE target_id = $1',
      [key],
    );
    return rows[0] ? BigInt(rows[0].t) : undefined;
  };

  /**
   * A acquires a new key and stalls after drawing its token; B acquires the key meanwhile (a larger token) and
   * releases it; once B's grant is older than the purge bound, B's purge deletes the row; then A's insert goes on.
   */
  async function stallAcrossPurge(key: string, stalledPurgeAfterMs: number) {
    const a = store('stalled', stalledPurgeAfterMs);
    const b = store('b');
    const stalled = a.tryAcquire(request(key)).then(
      (outcome) => ({ outcome }),
      (error: unknown) => ({ error: error as Error }),
    );
    await eventually(sleeping, (n) => n === 1, 'the acquisition stalled after drawing its token', 2_000);
    const bLease = request(key);
    const granted = await b.tryAcquire(bLease);
    if (!('fencingToken' in granted)) throw new Error('b was refused');
    expect(await b.release(ownRow(key), bLease.leaseToken, 1_000)).toBe(true);
    // A later grant of another key: the table's largest token (whose row a purge keeps) is not B's.
    const later = request(`${key}:later`);
    await b.tryAcquire(later);
    await b.release(ownRow(later.targetKey), later.leaseToken, 1_000);
    await new Promise((resolve) => setTimeout(resolve, PURGE_AFTER_MS + 100));
    expect(await sleeping()).toBe(1); // A still stalls: the purge runs across it
    expect(await b.purge()).toBeGreaterThanOrEqual(1); // the key's row, and older rows of earlier tests
    expect(await tokenOf(key)).toBeUndefined();
    return { a, bToken: granted.fencingToken, stalled: await stalled };
  }

  test('an acquisition stalled across a purge fails at its cap, undone; the next token is larger', async () => {
    const { a, bToken, stalled } = await stallAcrossPurge('order:1', PURGE_AFTER_MS);
    expect('error' in stalled && stalled.error.message).toMatch(/the acquisition ran past its cap of 1500 ms/);
    expect(await tokenOf('order:1')).toBeUndefined(); // undone: nothing of A's is in the table
    const again = await store('a').tryAcquire(request('order:1'));
    expect('fencingToken' in again && again.fencingToken).toBeGreaterThan(bToken);
    void a;
  }, 20_000);

  test('without the cap (an acquisition allowed past the purge bound) the stalled insert lands a smaller token', async () => {
    // The race the cap closes, shown: A's statement may run 30 min (the default bound's cap), B purges after 3 s.
    const { bToken, stalled } = await stallAcrossPurge('order:2', 3_600_000);
    expect('outcome' in stalled && 'fencingToken' in stalled.outcome).toBe(true);
    expect(await tokenOf('order:2')).toBeLessThan(bToken); // the token went back: the bound must hold for every process
  }, 20_000);

  test('the purge deletes only free rows granted longer ago than the bound, and a purged key starts above', async () => {
    const s = store('p');
    const acquire = async (key: string, holdMs = 0) => {
      const r = { ...request(key), holdMs };
      const granted = await s.tryAcquire(r);
      if (!('fencingToken' in granted)) throw new Error(`${key} refused`);
      return { ...r, token: granted.fencingToken };
    };
    const released = await acquire('old:released');
    await s.release(ownRow(released.targetKey), released.leaseToken, 1_000);
    await acquire('old:live'); // held and renewed: never purged, however old its grant
    await acquire('old:expired'); // a crashed holder: expired, not released
    const held = await acquire('old:hold', 3_600_000);
    await s.release(ownRow(held.targetKey), held.leaseToken, 1_000); // released, but its hold still runs
    const recent = await acquire('new:released');
    await s.release(ownRow(recent.targetKey), recent.leaseToken, 1_000);
    await db.admin.query(
      `UPDATE job_lease SET acquired_at = acquired_at - interval '1 hour',
         updated_at = CASE WHEN target_id = 'old:live' THEN clock_timestamp() ELSE updated_at - interval '1 hour' END
       WHERE target_id LIKE 'old:%'`,
    );
    await db.admin.query(`UPDATE job_lease SET hold_ms = 7200000 WHERE target_id = 'old:hold'`);
    expect(await s.purge()).toBeGreaterThanOrEqual(2);
    const { rows } = await db.admin.query<{ k: string }>('SELECT target_id AS k FROM job_lease ORDER BY 1');
    expect(rows.map((row) => row.k).filter((k) => /^(old|new):/.test(k))).toEqual([
      'new:released',
      'old:hold',
      'old:live',
    ]);
    const back = await acquire('old:released');
    expect(back.token).toBeGreaterThan(recent.token);
  });

  test('a purge leaves a high-water mark above every token it deleted; the mark itself is never purged or listed', async () => {
    const s = store('mark');
    const granted: bigint[] = [];
    for (const key of ['mark:a', 'mark:b', 'mark:top']) {
      const r = request(key);
      const outcome = await s.tryAcquire(r);
      if ('fencingToken' in outcome) granted.push(outcome.fencingToken);
      await s.release(ownRow(key), r.leaseToken, 1_000);
    }
    await db.admin.query(
      `UPDATE job_lease SET acquired_at = acquired_at - interval '2 hours' WHERE target_id IN ('mark:a', 'mark:b')`,
    );
    expect(await s.purge()).toBeGreaterThanOrEqual(2);
    const mark = async () =>
      (await db.admin.query<{ t: string }>(`SELECT fencing_token::text AS t FROM job_lease WHERE slot = -1`)).rows;
    const [first] = await mark();
    expect(BigInt(first.t)).toBeGreaterThanOrEqual(granted[1]);
    // Older than any bound and free: still never purged; not a lease anyone holds, so never listed.
    await db.admin.query(`UPDATE job_lease SET acquired_at = acquired_at - interval '2 hours' WHERE slot = -1`);
    await s.purge();
    expect(await mark()).toHaveLength(1);
    const service = await db.open({ tables: { createSchema: false }, owner: 'mark' });
    expect((await service.service.list()).filter((row) => row.targetKey === '\u001f')).toEqual([]);
  });

  test('the row of the largest token is never purged: a fixed timeline (no WAL functions) is read from it', async () => {
    const s = store('max');
    for (const key of ['max:a', 'max:b']) {
      const r = request(key);
      await s.tryAcquire(r);
      await s.release(ownRow(key), r.leaseToken, 1_000);
    }
    // The largest token of the table, of a later timeline (a restore from a promoted server, say), and old.
    await db.admin.query(`UPDATE job_lease SET fencing_token = (9::bigint << 47) | 1 WHERE target_id = 'max:b'`);
    await db.admin.query(
      `UPDATE job_lease SET acquired_at = acquired_at - interval '2 hours' WHERE target_id LIKE 'max:%'`,
    );
    await s.purge();
    expect(await tokenOf('max:a')).toBeUndefined();
    expect(await tokenOf('max:b')).toBe((9n << 47n) | 1n);
  });

  test('a service runs the purge (by itself every 10 min; here at once)', async () => {
    // Its bootstrap first: the table holds a token of timeline 9 (the test before), so its tokens carry timeline 9,
    // and a key's first row is above the high-water mark the purges left. The later key holds the largest token.
    const service = await db.open({ tables: { createSchema: false } });
    for (const key of ['boot:old', 'boot:later']) await (await service.service.tryAcquire(key))!.release();
    await db.admin.query(
      `UPDATE job_lease SET acquired_at = acquired_at - interval '2 hours' WHERE target_id = 'boot:old'`,
    );
    expect(await purgeFreeRows(service.service)).toBeGreaterThanOrEqual(1);
    expect(await tokenOf('boot:old')).toBeUndefined();
    expect(await service.service.tryAcquire('boot:new')).not.toBeNull();
  });
});
