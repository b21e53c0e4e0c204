/**
 * One caller's key never stalls the rest of its acquire batch (issue 21 item 2): a key that has no row yet and is
 * being inserted by another process whose transaction has not committed (its insert held inside PostgreSQL by a
 * trigger that sleeps for that process only), acquired in the same turn as two free keys.
 */
import { LeaseUnavailableError } from 'nest-pg-lease';
import { eventually, useTestDatabase } from '../support/db.js';
import { procsOf, sleepingIn } from '../priority/helpers.js';

const STALL_S = 4;

describe('an acquire batch and another process’s uncommitted insert', () => {
  const db = useTestDatabase('batchisolation', 'read committed', async (admin) => {
    // After the row is inserted (its index entry exists, its transaction open): a concurrent insert of the key waits.
    await admin.query(`CREATE FUNCTION stall_insert() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.owner LIKE 'inserter-%' THEN PERFORM pg_sleep(${STALL_S}); END IF; RETURN NULL; END $$`);
  });
  const proc = procsOf(db);

  test('a batch never waits for the uncommitted insert of a new key; each caller gets its own result', async () => {
    // The inserter's statement may take its 4 s (an acquisition bound of 9 s); the batcher's bound is 900 ms
    // (the test timings), shorter than the stall.
    const inserter = await proc('inserter', { timing: { heartbeatIntervalMs: 1_000, leaseTimeoutMs: 10_000 } });
    const batcher = await proc('batcher');
    await db.admin.query(`CREATE TRIGGER stall_insert AFTER INSERT ON job_lease
      FOR EACH ROW EXECUTE FUNCTION stall_insert()`);
    const stalled = inserter.service.tryAcquire('fresh:contended');
    await eventually(
      () => sleepingIn(db.admin, inserter.owner),
      (n) => n === 1,
      'the inserter held inside its insert',
    );

    const started = performance.now();
    const elapsed = (promise: Promise<unknown>) => promise.then(() => performance.now() - started);
    // One turn of the event loop: the three calls go in one batch.
    const contended = batcher.service.tryAcquire('fresh:contended');
    const freeA = batcher.service.tryAcquire('free:a');
    const freeB = batcher.service.tryAcquire('free:b');
    const [aMs, bMs] = await Promise.all([elapsed(freeA), elapsed(freeB)]);
    expect(aMs).toBeLessThan(1_000);
    expect(bMs).toBeLessThan(1_000);
    const [a, b] = await Promise.all([freeA, freeB]);
    expect(a?.isHeld()).toBe(true);
    expect(b?.isHeld()).toBe(true);

    // The contended caller alone waits for the other transaction (within its own bound): refused once the inserter
    // commits its grant, or unavailable when its bound ends first — never a lease on a key someone else holds.
    const outcome = await contended.then(
      (lease) => lease,
      (error: unknown) => error,
    );
    if (outcome instanceof Error) expect(outcome).toBeInstanceOf(LeaseUnavailableError);
    else expect(outcome).toBeNull();
    const winner = await stalled;
    expect(winner?.isHeld()).toBe(true);

    // Every live row is held by a lease its process knows about: nothing committed by an abandoned statement.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const { rows } = await db.admin.query<{ target_id: string; owner: string; token: string }>(
      `SELECT target_id, owner, lease_token::text AS token FROM job_lease
       WHERE lease_token IS NOT NULL AND updated_at + lease_timeout_ms * interval '1 ms' > clock_timestamp()
       ORDER BY target_id`,
    );
    const known = new Set(
      [...batcher.service.heldLeases(), ...inserter.service.heldLeases()].map((lease) => lease.token),
    );
    expect(rows.map((row) => [row.target_id, known.has(row.token)])).toEqual([
      ['free:a', true],
      ['free:b', true],
      ['fresh:contended', true],
    ]);
    await Promise.all([a?.release(), b?.release(), winner?.release()]);
    await db.admin.query('DROP TRIGGER stall_insert ON job_lease');
  });
});
