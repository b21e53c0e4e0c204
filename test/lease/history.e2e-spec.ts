import { LeaseConfigError } from 'nest-pg-lease';
import pg from 'pg';
import { ownRow, resolveLeaseOptions, LeaseStore } from '../../libs/lease/src/internal.js';
import { FAST, type OpenedService, startService, useTestDatabase } from '../support/db.js';

/**
 * Fencing tokens carry the server's history: `(timeline << 47) | sequence value`, so they never go back across a
 * failover (test/failover/history.failover-spec.ts promotes a real standby); a renewal refuses leases of another
 * history. Here, on one server: the layout, the refusal past 2^47, and the renewal's check against a history given to
 * it. (A real timeline change needs a promoted standby: see the failover suite.)
 */
describe('fencing tokens and the server history', () => {
  const db = useTestDatabase('history');
  let a: OpenedService;
  const low = (token: bigint) => token & ((1n << 47n) - 1n);

  beforeAll(async () => {
    a = await db.open({ owner: 'history-a' });
  });

  const timeline = async () =>
    BigInt(
      (
        await db.admin.query<{ timeline: string }>(
          `SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint::text AS timeline`,
        )
      ).rows[0].timeline,
    );

  test('a fencing token is (timeline << 47) | the sequence value, on the insert and the update path', async () => {
    const first = (await a.service.tryAcquire('history:layout'))!;
    const drawn = BigInt((await db.admin.query('SELECT last_value::text AS v FROM job_lease_fencing_seq')).rows[0].v);
    expect(first.fencingToken >> 47n).toBe(await timeline());
    expect(low(first.fencingToken)).toBe(drawn);
    await first.release();
    const second = (await a.service.tryAcquire('history:layout'))!; // the row stays: drawn in DO UPDATE
    const drawnAgain = BigInt(
      (await db.admin.query('SELECT last_value::text AS v FROM job_lease_fencing_seq')).rows[0].v,
    );
    expect(second.fencingToken >> 47n).toBe(await timeline());
    expect(low(second.fencingToken)).toBe(drawnAgain);
    expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
    await second.release();
  });

  test('tokens of versions before the layout (plain sequence values) stay below the new ones', async () => {
    await db.admin.query(`INSERT INTO job_lease
      (target_id, lease_token, fencing_token, owner, lease_timeout_ms, acquired_at, updated_at)
      VALUES ('history:old', gen_random_uuid(), 987654321, 'old-version', 1000, now() - interval '1 hour',
        now() - interval '1 hour')`);
    const taker = (await a.service.tryAcquire('history:old'))!;
    expect(taker.fencingToken).toBeGreaterThan(987654321n);
    await taker.release();
  });

  test("a waiter's place in line carries the timeline too", async () => {
    const holder = (await a.service.tryAcquire('history:line'))!;
    const waiting = a.service.acquire('history:line', { priority: 1, onBusy: { wait: { timeoutMs: 10_000 } } });
    const queued = async () =>
      (await db.admin.query<{ seq: string }>(`SELECT seq::text FROM job_lease_waiter WHERE target_id = 'history:line'`))
        .rows;
    for (let i = 0; (await queued()).length === 0; i++) {
      if (i > 200) throw new Error('the waiter never queued');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(BigInt((await queued())[0].seq) >> 47n).toBe(await timeline());
    await holder.release();
    await (await waiting).release();
  });

  describe('past 2^47 sequence values', () => {
    afterEach(async () => {
      await db.admin.query(
        `SELECT setval('job_lease_fencing_seq', ${(1n << 40n) + 1000n}), setval('job_lease_waiter_seq', ${(1n << 40n) + 1000n})`,
      );
    });

    test.each([
      ['a new key (the insert path)', 'history:full:new', false],
      ['a released key (the update path)', 'history:full:released', true],
    ])('%s: refused with a LeaseConfigError, nothing written', async (_what, key, existing) => {
      if (existing) await (await a.service.tryAcquire(key))!.release();
      const before = (await db.admin.query('SELECT * FROM job_lease WHERE target_id = $1', [key])).rows;
      await db.admin.query(`SELECT setval('job_lease_fencing_seq', ${(1n << 47n) - 1n})`);
      const refused = await a.service.tryAcquire(key).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(refused).toBeInstanceOf(LeaseConfigError);
      expect(String((refused as Error).message)).toMatch(/passed 2\^47/);
      expect((await db.admin.query('SELECT * FROM job_lease WHERE target_id = $1', [key])).rows).toEqual(before);
    });

    test("a waiter's place: the wait ends at once with a LeaseConfigError, no row left", async () => {
      const holder = (await a.service.tryAcquire('history:full:line'))!;
      await db.admin.query(`SELECT setval('job_lease_waiter_seq', ${(1n << 47n) - 1n})`);
      const started = performance.now();
      const waiting = a.service.acquire('history:full:line', { priority: 1, onBusy: { wait: { timeoutMs: 20_000 } } });
      await expect(waiting).rejects.toBeInstanceOf(LeaseConfigError);
      expect(performance.now() - started).toBeLessThan(5_000);
      const left = await db.admin.query(`SELECT * FROM job_lease_waiter WHERE target_id = 'history:full:line'`);
      expect(left.rows).toEqual([]);
      await holder.release();
    });
  });

  describe('the renewal checks the history of each lease', () => {
    let pool: pg.Pool;
    let store: LeaseStore;
    // Leases whose own heartbeat stays away (a minute apart), so no renewal of theirs holds a row these tests renew.
    let quiet: Awaited<ReturnType<typeof startService>>;
    beforeAll(async () => {
      pool = new pg.Pool({ connectionString: db.url, max: 1 });
      store = new LeaseStore(pool, pool, resolveLeaseOptions(FAST));
      const slow = { timing: { heartbeatIntervalMs: 60_000, leaseTimeoutMs: 600_000 } };
      quiet = await startService(db.url, { ...slow, owner: 'history-quiet' });
    });
    afterAll(async () => {
      await quiet.close();
      await pool.end();
    });

    const updatedAt = async (key: string) =>
      (await db.admin.query<{ t: string }>(`SELECT updated_at::text AS t FROM job_lease WHERE target_id = $1`, [key]))
        .rows[0].t;

    test('a lease whose token carries another timeline is reported as failover and not renewed', async () => {
      const lease = (await quiet.service.tryAcquire('history:renew:timeline'))!;
      const other = (await quiet.service.tryAcquire('history:renew:same'))!;
      try {
        const before = await updatedAt('history:renew:timeline');
        const now = await timeline();
        const result = await store.renew(
          [ownRow('history:renew:timeline'), ownRow('history:renew:same')],
          [lease.token, other.token],
          5_000,
          { fencingTokens: [((now + 1n) << 47n) | low(lease.fencingToken), other.fencingToken], systemId: null },
        );
        expect(result.failover).toEqual(new Set([lease.token]));
        expect(result.kept).toEqual(new Set([other.token]));
        expect(result.history).toEqual({ recovery: false, timeline: now, systemId: expect.stringMatching(/^-?\d+$/) });
        expect(await updatedAt('history:renew:timeline')).toBe(before);
      } finally {
        await lease.release();
        await other.release();
      }
    });

    test('another system identifier: every lease is reported as failover, none renewed', async () => {
      const lease = (await quiet.service.tryAcquire('history:renew:system'))!;
      try {
        const before = await updatedAt('history:renew:system');
        const { systemId } = (
          await store.renew([ownRow('history:renew:system')], [lease.token], 5_000, {
            fencingTokens: [lease.fencingToken],
            systemId: null,
          })
        ).history!;
        const moved = await updatedAt('history:renew:system');
        expect(moved).not.toBe(before); // same history: renewed
        const result = await store.renew([ownRow('history:renew:system')], [lease.token], 5_000, {
          fencingTokens: [lease.fencingToken],
          systemId: `${systemId}1`,
        });
        expect(result.failover).toEqual(new Set([lease.token]));
        expect(result.kept).toEqual(new Set());
        expect(await updatedAt('history:renew:system')).toBe(moved);
      } finally {
        await lease.release();
      }
    });
  });
});
