import { randomUUID } from 'node:crypto';
import type { LeaseEvent } from 'nest-pg-lease';
import pg from 'pg';
import { schemaStatements } from '../../libs/lease/src/internal.js';
import { eventually, ISOLATIONS, startService, useTestDatabase } from '../support/db.js';

/**
 * The lone caller's path (issue 27): a newcomer that does not wait, on a key with no waiter line, acquires with one
 * lean statement and releases with another; wherever a line, a takeover or a concurrent writer is involved, the lean
 * statement hands over to the single statement, so the answer is always the single statement's. The statements are
 * read off every pg client of the process (their prepared names), the outcomes off the database.
 */
describe.each(ISOLATIONS)('the lone caller (default_transaction_isolation = %s)', (isolation) => {
  const db = useTestDatabase('lone_caller', isolation, async (admin) => {
    for (const statement of schemaStatements({
      schema: 'public',
      tableName: 'job_lease',
      waiterTableName: 'job_lease_waiter',
    })) {
      await admin.query(statement);
    }
  });

  /**
   * The prepared names of the acquisitions and releases sent while `work` runs (heartbeats left out), without their
   * configuration prefix.
   */
  async function statementsOf<T>(work: () => Promise<T>): Promise<{ names: string[]; result: T }> {
    const names: string[] = [];
    const query = pg.Client.prototype.query;
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      const config = args[0] as { name?: string; text?: string } | string;
      const name = typeof config === 'object' ? config?.name?.replace(/^lease_[0-9a-f]+(_\w\d+)*_/, '') : undefined;
      if (name && /^(acquire|release)/.test(name)) names.push(name);
      return (query as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof query;
    try {
      return { names, result: await work() };
    } finally {
      pg.Client.prototype.query = query;
    }
  }

  const row = async (key: string) =>
    (
      await db.admin.query<{ lease_token: string | null; fencing_token: string; owner: string }>(
        `SELECT lease_token, fencing_token::text, owner FROM job_lease WHERE target_id = $1`,
        [key],
      )
    ).rows[0];

  /** A waiter row of another process, written directly: `aliveMs` from now (negative: already dead). */
  const waiterRow = (key: string, priority: number, aliveMs: number) =>
    db.admin.query(
      `INSERT INTO job_lease_waiter (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
       VALUES ($1, $2, 'elsewhere', $3, $4, clock_timestamp(), nextval('job_lease_waiter_seq'), clock_timestamp())`,
      [key, randomUUID(), priority, Math.max(1, aliveMs)],
    );

  test('acquire and release send one lean statement each; a kept row is taken again with a larger token', async () => {
    const a = await startService(db.url, {}, 'lone');
    try {
      const first = await statementsOf(async () => {
        const lease = (await a.service.tryAcquire('lone:plain'))!;
        expect((await row('lone:plain')).lease_token).not.toBeNull();
        await lease.release();
        return lease.fencingToken;
      });
      expect(first.names).toEqual(['acquire_lone', 'release_lone']);
      expect((await row('lone:plain')).lease_token).toBeNull();
      // The row was kept: the UPDATE path, its token drawn after the row lock.
      const second = await statementsOf(async () => {
        const lease = (await a.service.tryAcquire('lone:plain'))!;
        await lease.release();
        return lease.fencingToken;
      });
      expect(second.names).toEqual(['acquire_lone', 'release_lone']);
      expect(second.result).toBeGreaterThan(first.result);
      expect(BigInt((await row('lone:plain')).fencing_token)).toBe(second.result);
    } finally {
      await a.close();
    }
  });

  test('a held key is refused by the lean statement alone and nothing is written', async () => {
    const a = await startService(db.url, {}, 'holder');
    const b = await startService(db.url, {}, 'newcomer');
    try {
      const held = (await a.service.tryAcquire('lone:held'))!;
      const before = await row('lone:held');
      const { names, result } = await statementsOf(() => b.service.tryAcquire('lone:held'));
      expect(result).toBeNull();
      expect(names).toEqual(['acquire_lone']);
      expect(await row('lone:held')).toEqual(before);
      await held.release();
    } finally {
      await b.close();
      await a.close();
    }
  });

  test('a free key with a line: the single statement decides (priority over the line, dead waiters go)', async () => {
    const a = await startService(db.url, {}, 'newcomer');
    try {
      // A live waiter of priority 1 (its process polls elsewhere): a newcomer of priority 0 may not pass it…
      await waiterRow('lone:line', 1, 60_000);
      const refused = await statementsOf(() => a.service.tryAcquire('lone:line', { priority: 0 }));
      expect(refused.result).toBeNull();
      expect(refused.names).toEqual(['acquire_lone', 'acquire']);
      // … one of priority 2 may, and the waiter stays in line.
      const passed = await statementsOf(() => a.service.tryAcquire('lone:line', { priority: 2 }));
      expect(passed.result).not.toBeNull();
      expect(passed.names).toEqual(['acquire_lone', 'acquire']);
      const { rows: line } = await db.admin.query(`SELECT 1 FROM job_lease_waiter WHERE target_id = 'lone:line'`);
      expect(line).toHaveLength(1);
      // Its release hands the key to that waiter (the single release: the lease came from the single statement).
      const released = await statementsOf(() => passed.result!.release());
      expect(released.names).toEqual(['release']);
      expect((await row('lone:line')).owner).toBe('elsewhere');

      // A dead waiter holds nobody back, and goes with the grant.
      await waiterRow('lone:dead', 5, -1_000);
      await new Promise((resolve) => setTimeout(resolve, 20));
      const lease = (await a.service.tryAcquire('lone:dead'))!;
      expect(lease).not.toBeNull();
      const { rows: dead } = await db.admin.query(`SELECT 1 FROM job_lease_waiter WHERE target_id = 'lone:dead'`);
      expect(dead).toHaveLength(0);
      await lease.release();
    } finally {
      await a.close();
    }
  });

  test('an expired holder is taken over through the single statement, which reports the takeover', async () => {
    const a = await startService(db.url, {}, 'taker');
    const events: LeaseEvent[] = [];
    const subscription = a.service.events$.subscribe((event) => events.push(event));
    try {
      await db.admin.query(
        `INSERT INTO job_lease (target_id, lease_token, fencing_token, owner, lease_timeout_ms, acquired_at, updated_at)
         VALUES ('lone:expired', $1, nextval('job_lease_fencing_seq'), 'crashed', 1000,
           clock_timestamp() - interval '1 minute', clock_timestamp() - interval '1 minute')`,
        [randomUUID()],
      );
      const before = BigInt((await row('lone:expired')).fencing_token);
      const { names, result } = await statementsOf(() => a.service.tryAcquire('lone:expired'));
      expect(names).toEqual(['acquire_lone', 'acquire']);
      expect(result!.fencingToken).toBeGreaterThan(before);
      const takeover = events.find((event) => event.type === 'taken-over');
      expect(takeover).toMatchObject({ targetKey: 'lone:expired', previousOwner: 'crashed' });
      // The single statement's lease releases with the single statement.
      const released = await statementsOf(() => result!.release());
      expect(released.names).toEqual(['release']);
    } finally {
      subscription.unsubscribe();
      await a.close();
    }
  });

  test('a line that formed during the hold: the release hands the key to its head in the same commit', async () => {
    const a = await startService(db.url, {}, 'lone-holder');
    const b = await startService(db.url, { timing: { waitPollIntervalMs: 60_000 }, owner: 'waiter-b' }, 'waiter');
    try {
      const lease = (await a.service.tryAcquire('lone:formed'))!;
      const waiting = b.service.acquire('lone:formed', { onBusy: { wait: { timeoutMs: 30_000 } } });
      await eventually(
        () => db.admin.query(`SELECT waiter_id::text FROM job_lease_waiter WHERE target_id = 'lone:formed'`),
        (result) => result.rows.length === 1,
        'the waiter to queue',
      );
      const { names } = await statementsOf(() => lease.release());
      // (The waiter's process sends its own statements meanwhile: only the releases are this release's.)
      expect(names.filter((name) => name.startsWith('release'))).toEqual(['release_lone', 'release']);
      // Right after the release the row already belongs to the waiter (direct handoff), not free.
      expect((await row('lone:formed')).owner).toBe('waiter-b');
      const next = await waiting;
      expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
      await next.release();
    } finally {
      await b.close();
      await a.close();
    }
  });

  test('an uncommitted first insert of the key by another session: the lean statement waits for it, then obeys it', async () => {
    const a = await startService(db.url, { owner: 'racer-a' }, 'lone-racer');
    const other = new pg.Client({ connectionString: db.url });
    await other.connect();
    try {
      for (const [key, token] of [
        ['lone:race-held', randomUUID()],
        ['lone:race-free', null],
      ] as const) {
        await other.query('BEGIN');
        const { rows: written } = await other.query<{ t: string }>(
          `INSERT INTO job_lease (target_id, lease_token, fencing_token, owner, lease_timeout_ms, acquired_at, updated_at)
           VALUES ($1, $2, nextval('job_lease_fencing_seq'), 'other', 60000, clock_timestamp(), clock_timestamp())
           RETURNING fencing_token::text AS t`,
          [key, token],
        );
        const inserted = BigInt(written[0].t);
        const attempt = a.service.tryAcquire(key);
        // The lean statement's INSERT waits for the other session's uncommitted row.
        await eventually(
          () =>
            db.admin.query(
              `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
            ),
          (result) => result.rows.length === 1,
          'the acquisition to wait for the uncommitted insert',
        );
        await other.query('COMMIT');
        const lease = await attempt;
        if (token !== null) {
          // Held by the other session once it committed: refused, nothing changed.
          expect(lease).toBeNull();
          expect((await row(key)).owner).toBe('other');
        } else {
          // Free once committed: taken, with a token drawn after the row lock.
          expect(lease).not.toBeNull();
          expect(lease!.fencingToken).toBeGreaterThan(inserted);
          expect(BigInt((await row(key)).fencing_token)).toBe(lease!.fencingToken);
          expect((await row(key)).owner).toBe('racer-a');
          await lease!.release();
        }
      }
    } finally {
      await other.end();
      await a.close();
    }
  });
});
