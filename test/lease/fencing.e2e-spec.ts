import { LeaseLostError } from 'nest-pg-lease';
import { eventually, ISOLATIONS, startService, useTestDatabase } from '../support/db.js';

/** Holder heartbeats every 2 s: the test ages its row and races a takeover without a renewal in between. */
const SLOW = { timing: { heartbeatIntervalMs: 2_000, leaseTimeoutMs: 6_000 } };

describe.each(ISOLATIONS)('fenced writes (default_transaction_isolation = %s)', (isolation) => {
  const db = useTestDatabase('fencing', isolation, (admin) =>
    admin.query('CREATE TABLE job_result (target_id text, fencing_token bigint NOT NULL, data text)'),
  );

  const results = async (key: string) =>
    (
      await db.admin.query(
        'SELECT fencing_token::text, data FROM job_result WHERE target_id = $1 ORDER BY fencing_token',
        [key],
      )
    ).rows;

  test('a takeover racing a fenced write blocks on the row lock until the fenced transaction ends', async () => {
    const a = await startService(db.url, SLOW, 'holder-a');
    const b = await startService(db.url, {}, 'taker-b');
    try {
      const old = (await a.service.tryAcquire('race'))!;
      await db.admin.query(`UPDATE job_lease SET updated_at = updated_at - interval '1 hour' WHERE target_id = 'race'`);
      let letGo!: () => void;
      const gate = new Promise<void>((resolve) => (letGo = resolve));
      let inside!: () => void;
      const entered = new Promise<void>((resolve) => (inside = resolve));
      const write = old.fenced(async (manager) => {
        await manager.query(`INSERT INTO job_result VALUES ('race', $1, 'old')`, [old.fencingToken.toString()]);
        inside();
        await gate;
        return 'committed';
      });
      await entered;
      const takeover = b.service.tryAcquire('race');
      // The taker's upsert waits for the fenced transaction's row lock.
      const blocking = await eventually(
        () =>
          db.admin.query(`
            SELECT w.pid, pg_blocking_pids(w.pid) AS blockers,
              (SELECT array_agg(pid) FROM pg_stat_activity WHERE application_name = 'holder-a') AS holders
            FROM pg_stat_activity w WHERE w.application_name = 'taker-b:statements' AND w.wait_event_type = 'Lock'`),
        (result) => result.rows.length === 1,
        'the takeover to wait on a lock',
      );
      const { blockers, holders } = blocking.rows[0];
      expect(blockers.length).toBe(1);
      expect(holders).toContain(blockers[0]);
      letGo();
      await expect(write).resolves.toBe('committed');
      const taker = await takeover;
      expect(taker).not.toBeNull();
      expect(taker!.fencingToken).toBeGreaterThan(old.fencingToken);
      // Consistent: the old holder's write committed before the new acquisition, and it cannot write again.
      await expect(
        old.fenced(async (manager) =>
          manager.query(`INSERT INTO job_result VALUES ('race', $1, 'late')`, [old.fencingToken.toString()]),
        ),
      ).rejects.toBeInstanceOf(LeaseLostError);
      await taker!.fenced(async (manager) =>
        manager.query(`INSERT INTO job_result VALUES ('race', $1, 'new')`, [taker!.fencingToken.toString()]),
      );
      expect(await results('race')).toEqual([
        { fencing_token: old.fencingToken.toString(), data: 'old' },
        { fencing_token: taker!.fencingToken.toString(), data: 'new' },
      ]);
      await taker!.release();
      await old.release();
    } finally {
      await a.close();
      await b.close();
    }
  });

  test("when the takeover commits first, the old holder's fenced write is refused and leaves nothing", async () => {
    const a = await startService(db.url, SLOW);
    const b = await startService(db.url);
    try {
      const old = (await a.service.tryAcquire('race2'))!;
      await db.admin.query(
        `UPDATE job_lease SET updated_at = updated_at - interval '1 hour' WHERE target_id = 'race2'`,
      );
      const taker = (await b.service.tryAcquire('race2'))!;
      let ran = false;
      await expect(
        old.fenced(async (manager) => {
          ran = true;
          await manager.query(`INSERT INTO job_result VALUES ('race2', $1, 'stale')`, [old.fencingToken.toString()]);
        }),
      ).rejects.toBeInstanceOf(LeaseLostError);
      expect(ran).toBe(false);
      expect(await results('race2')).toEqual([]);
      await taker.release();
    } finally {
      await a.close();
      await b.close();
    }
  });

  test('an error inside the fenced work rolls everything back and leaves the lease held', async () => {
    const a = await startService(db.url);
    try {
      const lease = (await a.service.tryAcquire('rollback'))!;
      await expect(
        lease.fenced(async (manager) => {
          await manager.query(`INSERT INTO job_result VALUES ('rollback', $1, 'partial')`, [
            lease.fencingToken.toString(),
          ]);
          throw new Error('validation failed');
        }),
      ).rejects.toThrow('validation failed');
      expect(await results('rollback')).toEqual([]);
      expect(lease.isHeld()).toBe(true);
      await lease.release();
    } finally {
      await a.close();
    }
  });

  test('a released lease cannot fence', async () => {
    const a = await startService(db.url);
    try {
      const lease = (await a.service.tryAcquire('released'))!;
      await lease.release();
      const error = await lease.fenced(async () => 'never').catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(LeaseLostError);
      expect((error as LeaseLostError).reason).toBe('released');
    } finally {
      await a.close();
    }
  });
});
