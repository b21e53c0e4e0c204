import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';
import { openService } from '../support/lease-service.js';
import { eventually, FAST, useTestDatabase } from '../support/db.js';

/**
 * The library's statements are prepared once per connection, and after five runs PostgreSQL may keep a generic plan:
 * one built while the lease table was nearly empty, where a sequential scan is the cheapest way to read a page or
 * two. A table that grows from there (a new deployment under load, before autovacuum first analyzes it; or a server
 * whose autovacuum is off) must not be read whole by every batch: each batched acquisition and release reads the
 * rows of its keys by index, whatever the table's size was when its plan was made.
 */
describe('a lease table grown under plans made while it was empty', () => {
  const db = useTestDatabase('grown_table');

  /** The table's counters, once the statistics of the statements run so far have reached them. */
  const counters = async () =>
    (
      await db.admin.query<{ seq: number; ins: number; upd: number }>(
        `SELECT seq_scan::int AS seq, n_tup_ins::int AS ins, n_tup_upd::int AS upd
         FROM pg_stat_user_tables WHERE relid = 'job_lease'::regclass`,
      )
    ).rows[0];

  test('batched acquisitions and releases on a table grown from empty read it by index, never by a scan', async () => {
    // One connection for the statements: every batch runs on the session whose plans are cached.
    const a = await openService(db.url, mergeLeaseOptions({ tables: { createSchema: true } }, FAST), { poolSize: 1 });
    try {
      await db.admin.query('ALTER TABLE job_lease SET (autovacuum_enabled = false)');
      let burst = 0;
      // Eight calls in one turn: one batch statement for the acquisitions, one for the releases.
      const batch = async () => {
        const prefix = `grown:${burst++}`;
        const leases = await Promise.all(Array.from({ length: 8 }, (_, i) => a.service.tryAcquire(`${prefix}:${i}`)));
        expect(leases.every((lease) => lease !== null)).toBe(true);
        await Promise.all(leases.map((lease) => lease!.release()));
      };
      // A fenced() on the application's (one) connection: its lock and release are prepared there too.
      const fenced = async () => {
        const lease = (await a.service.tryAcquire(`grown:fenced:${burst++}`))!;
        await lease.fenced(async () => undefined);
        await lease.fenced(async () => undefined, { release: true });
      };
      // Ten batches and fenced() calls on the nearly empty table: each statement has run past the five custom plans.
      for (let round = 0; round < 10; round++) {
        await batch();
        await fenced();
      }
      // Grown to 30,000 released rows, never analyzed.
      await db.admin.query(
        `INSERT INTO job_lease (target_id, slot, lease_token, fencing_token, owner, priority, lease_timeout_ms,
           acquired_at, updated_at, hold_ms)
         SELECT 'filler:' || g, 0, NULL, g, 'grown', 0, 1000, clock_timestamp(), clock_timestamp(), 0
         FROM generate_series(1, 30000) g`,
      );
      const before = await eventually(counters, (now) => now.ins >= 30_090, 'the filler rows counted');
      for (let round = 0; round < 5; round++) {
        await batch();
        await fenced();
      }
      // 45 rows inserted, and 45 released (updated): the statistics of all five rounds are in once these are.
      const after = await eventually(
        counters,
        (now) => now.ins >= before.ins + 45 && now.upd >= before.upd + 45,
        'the five rounds counted',
      );
      expect(after.seq - before.seq).toBe(0);
    } finally {
      await a.close();
    }
  });
});
