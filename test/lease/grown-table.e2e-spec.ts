import { mergeLeaseOptions, useParkWindow } from '../../libs/lease/src/internal.js';
import { openService } from '../support/lease-service.js';
import { eventually, FAST, useTestDatabase } from '../support/db.js';

/**
 * The library's statements are prepared once per connection, and after five runs PostgreSQL may keep a generic plan:
 * one built while the lease tables were nearly empty, where reading a page or two whole is the cheapest plan. Tables
 * that grow from there (a new deployment under load, before autovacuum first analyzes them; or a server whose
 * autovacuum is off) must not be read whole by a statement: each acquisition, release, handoff and fenced write reads
 * the rows of its keys by index, whatever the tables' size was when its plan was made — neither by a sequential scan
 * nor by a walk of a whole index.
 */
describe('lease tables grown under plans made while they were empty', () => {
  const db = useTestDatabase('grown_table');

  /** A backend that ran a statement less than a second after its last report sends its counters once idle 10 s. */
  const STATS_MS = 30_000;

  /** Rows of the tables grown below: each is more than all five rounds may read. */
  const FILLER = 30_000;

  const TABLES = `('job_lease'::regclass, 'job_lease_waiter'::regclass)`;

  /**
   * The lease table's counters, and the tuples read from both tables (by scans and through every index), once the
   * statistics of the statements run so far have reached them.
   */
  const counters = async () =>
    (
      await db.admin.query<{ ins: number; upd: number; read: number }>(
        `SELECT t.n_tup_ins::int AS ins, t.n_tup_upd::int AS upd,
           (SELECT sum(s.seq_tup_read)::int FROM pg_stat_user_tables s WHERE s.relid IN ${TABLES})
             + (SELECT sum(i.idx_tup_read)::int FROM pg_stat_user_indexes i WHERE i.relid IN ${TABLES}) AS read
         FROM pg_stat_user_tables t WHERE t.relid = 'job_lease'::regclass`,
      )
    ).rows[0];

  test('acquisitions, releases, slots, preemptions, handoffs, parked places and fenced writes read grown tables by key', async () => {
    // One connection for the statements: every call runs on the session whose plans are cached.
    const options = mergeLeaseOptions({ tables: { createSchema: true } }, FAST);
    const a = await openService(db.url, options, { poolSize: 1 });
    const b = await openService(db.url, options, { poolSize: 1 });
    // a's releases park whatever the machine's load (see docs/group-commit.md, the parked place).
    useParkWindow(a.service, 10_000);
    try {
      await db.admin.query('ALTER TABLE job_lease SET (autovacuum_enabled = false)');
      await db.admin.query('ALTER TABLE job_lease_waiter SET (autovacuum_enabled = false)');
      let burst = 0;
      // A lone call (the lean statements), then eight calls in one turn: one batch statement for the acquisitions,
      // one for the releases.
      const calls = async () => {
        const lone = await a.service.tryAcquire(`grown:lone:${burst++}`);
        await lone!.release();
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
      // A key handed over: b waits in line (queued by its first attempt), a's release grants it, b confirms.
      const handoff = async () => {
        const key = `grown:hot:${burst++}`;
        const held = (await a.service.tryAcquire(key))!;
        const waiting = b.service.acquire(key, { onBusy: { wait: { timeoutMs: 10_000 } } });
        await eventually(
          async () => (await db.admin.query('SELECT 1 FROM job_lease_waiter WHERE target_id = $1', [key])).rowCount,
          (rows) => rows === 1,
          'b queued',
        );
        await held.release();
        await (await waiting).release();
      };
      // A hot key: a took it through the line and asked again at once after releasing it, so its next release hands
      // the key to b and queues a in the same statement (the parked place), and a's next call takes that place over.
      const parked = async () => {
        const key = `grown:parked:${burst++}`;
        const wait = { onBusy: { wait: { timeoutMs: 10_000 } } } as const;
        const queued = (what: string) =>
          eventually(
            async () => (await db.admin.query('SELECT 1 FROM job_lease_waiter WHERE target_id = $1', [key])).rowCount,
            (rows) => rows === 1,
            what,
          );
        for (let take = 0; take < 2; take++) {
          const theirs = (await b.service.tryAcquire(key))!;
          const mine = a.service.acquire(key, wait);
          await queued('a queued');
          await theirs.release();
          const lease = await mine;
          if (take === 0) {
            await lease.release();
            continue;
          }
          const next = b.service.acquire(key, wait);
          await queued('b queued');
          await lease.release();
          const again = a.service.acquire(key, wait);
          await (await next).release();
          await (await again).release();
        }
      };
      // Semaphores' slots, taken in one batch and released in one.
      const slots = async () => {
        const prefix = `grown:slots:${burst++}`;
        const leases = await Promise.all(
          Array.from({ length: 4 }, (_, i) => a.service.tryAcquire(`${prefix}:${i}`, { limit: 2 })),
        );
        expect(leases.every((lease) => lease !== null)).toBe(true);
        await Promise.all(leases.map((lease) => lease!.release()));
      };
      // A holder of lower priority preempted: b asks, and takes the key over after the grace.
      const preempt = async () => {
        const key = `grown:preempt:${burst++}`;
        const low = (await a.service.tryAcquire(key, { priority: 1 }))!;
        const high = await b.service.acquire(key, { priority: 5, onBusy: { preempt: { graceMs: 20 } } });
        expect(high.fencingToken).toBeGreaterThan(low.fencingToken);
        await high.release();
        await low.release();
      };
      const round = async () => {
        await calls();
        await fenced();
        await slots();
        await preempt();
        await handoff();
        await parked();
      };
      // Ten rounds on the nearly empty tables: each statement has run past the five custom plans.
      for (let i = 0; i < 10; i++) await round();
      // Both tables grown, never analyzed: released leases, and live waiters of other keys.
      await db.admin.query(
        `INSERT INTO job_lease (target_id, slot, lease_token, fencing_token, owner, priority, lease_timeout_ms,
           acquired_at, updated_at, hold_ms)
         SELECT 'filler:' || g, 0, NULL, g, 'grown', 0, 1000, clock_timestamp(), clock_timestamp(), 0
         FROM generate_series(1, ${FILLER}) g`,
      );
      await db.admin.query(
        `INSERT INTO job_lease_waiter (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
         SELECT 'filler:' || g, gen_random_uuid(), 'grown', 0, 3600000, clock_timestamp(), g, clock_timestamp()
         FROM generate_series(1, ${FILLER}) g`,
      );
      const before = await eventually(
        counters,
        (now) => now.ins >= 10 * 17 + FILLER,
        'the filler rows counted',
        STATS_MS,
      );
      for (let i = 0; i < 5; i++) await round();
      // Per round 17 rows inserted (lone, batch, fenced, slots, preempted, handed-over and parked keys) and at least 27
      // updated (releases, the grants and their confirmations, the preemption's request and takeover): the statistics
      // of all five rounds, of both services' sessions, are in once these are.
      const after = await eventually(
        counters,
        (now) => now.ins >= before.ins + 5 * 17 && now.upd >= before.upd + 5 * 27,
        'the five rounds counted',
        STATS_MS,
      );
      // A statement that scans a grown table, or walks a whole index of it, reads ≥ 30,000 tuples at once; by key,
      // five rounds read about 500. (Not counted in scans: a backend's counters reach the statistics up to seconds late,
      // so a scan of the bootstrap, of a table of a hundred rows, may land among the rounds'.)
      expect(after.read - before.read).toBeLessThan(FILLER / 10);
    } finally {
      await a.close();
      await b.close();
    }
  }, 120_000);
});
