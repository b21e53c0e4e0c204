/**
 * Semaphore slots through group commit (issue 40): the slot acquisitions made in one turn of the event loop — several
 * keys, several callers of one key — go in one statement and one commit, each caller with its own slot or its own
 * refusal, under the rules of the slot's single statement (no more than `limit` holders, lowest free slots first, the
 * waiters ahead, another limit refused); so do semaphores' slot releases, each key waking its line. The server counts
 * the statements: row triggers log the statement (its backend and start) of every slot row given a new lease token,
 * and of every slot row released.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { LeaseStore, resolveLeaseOptions, type AcquireRequest } from '../../libs/lease/src/internal.js';
import type { LeaseModuleOptions } from 'nest-pg-lease';
import { adminClient, eventually, useTestDatabase } from '../support/db.js';

function request(targetKey: string, extra: Partial<AcquireRequest> = {}): AcquireRequest {
  return { targetKey, leaseToken: randomUUID(), priority: 0, holdMs: 0, ...extra };
}

type SlotOutcome = Awaited<ReturnType<LeaseStore['slots']['tryAcquire']>>;
type AcquiredSlot = Extract<SlotOutcome, { rowSlot: number }>;
type SlotRefusal = Exclude<SlotOutcome, AcquiredSlot>;

const won = (outcome: AcquiredSlot | SlotRefusal): outcome is AcquiredSlot => !('refused' in outcome);

describe('semaphore slots through group commit', () => {
  const db = useTestDatabase('sembatch');
  let pool: pg.Pool;
  db.beforeDrop(() => pool?.end());

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: db.url, max: 8 });
    await new LeaseStore(pool, pool, resolveLeaseOptions({})).schema.createSchema();
    await db.admin.query(`CREATE TABLE slot_grants (pid int, started timestamptz, target_id text, slot int)`);
    // Logs every slot grant with its statement; fails a statement that writes a `bad:` key (a per-row error).
    await db.admin.query(`CREATE FUNCTION log_slot_grant() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.target_id LIKE 'bad:%' THEN RAISE EXCEPTION 'bad row %', NEW.target_id USING ERRCODE = 'P0001'; END IF;
        INSERT INTO slot_grants VALUES (pg_backend_pid(), statement_timestamp(), NEW.target_id, NEW.slot);
        RETURN NEW;
      END $$`);
    await db.admin.query(`CREATE TRIGGER slot_grant_new AFTER INSERT ON job_lease
      FOR EACH ROW WHEN (NEW.slot > 0) EXECUTE FUNCTION log_slot_grant()`);
    await db.admin.query(`CREATE TRIGGER slot_grant_old AFTER UPDATE ON job_lease FOR EACH ROW
      WHEN (NEW.slot > 0 AND NEW.lease_token IS NOT NULL AND OLD.lease_token IS DISTINCT FROM NEW.lease_token)
      EXECUTE FUNCTION log_slot_grant()`);
    // And every slot release with its statement.
    await db.admin.query(`CREATE TABLE slot_releases (pid int, started timestamptz, target_id text, slot int)`);
    await db.admin.query(`CREATE FUNCTION log_slot_release() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO slot_releases VALUES (pg_backend_pid(), statement_timestamp(), NEW.target_id, NEW.slot);
        RETURN NEW;
      END $$`);
    await db.admin.query(`CREATE TRIGGER slot_release AFTER UPDATE ON job_lease FOR EACH ROW
      WHEN (NEW.slot > 0 AND NEW.lease_token IS NULL AND OLD.lease_token IS NOT NULL)
      EXECUTE FUNCTION log_slot_release()`);
  });

  function store(options: LeaseModuleOptions = {}) {
    return new LeaseStore(pool, pool, resolveLeaseOptions(options));
  }

  /** The statements that granted slots of keys starting with `prefix` (each grant logged with its statement). */
  async function grantStatements(prefix: string, table = 'slot_grants'): Promise<number> {
    const { rows } = await db.admin.query<{ n: number }>(
      `SELECT count(DISTINCT (pid, started))::int AS n FROM ${table} WHERE target_id LIKE $1 || '%'`,
      [prefix],
    );
    return rows[0].n;
  }

  /** The statements that released slots of keys starting with `prefix`. */
  const releaseStatements = (prefix: string) => grantStatements(prefix, 'slot_releases');

  async function maxToken(): Promise<bigint> {
    const { rows } = await db.admin.query<{ max: string | null }>(
      `SELECT max(fencing_token)::text AS max FROM job_lease`,
    );
    return BigInt(rows[0].max ?? 0);
  }

  /** The live slot rows of `key`: slot → lease token, fencing token. */
  async function heldRows(key: string) {
    const { rows } = await db.admin.query<{ slot: number; lease_token: string; fencing_token: string }>(
      `SELECT slot, lease_token::text, fencing_token::text FROM job_lease
       WHERE target_id = $1 AND slot > 0 AND lease_token IS NOT NULL ORDER BY slot`,
      [key],
    );
    return rows;
  }

  /** Each key's grants: their slots in order, checked against the rows the database holds. */
  async function grantsByKey(requests: AcquireRequest[], outcomes: Array<AcquiredSlot | SlotRefusal>) {
    const byKey = new Map<string, Array<{ slot: number; token: bigint }>>();
    requests.forEach((r, i) => {
      const outcome = outcomes[i];
      if (!won(outcome)) return;
      byKey.set(r.targetKey, [
        ...(byKey.get(r.targetKey) ?? []),
        { slot: outcome.rowSlot, token: outcome.fencingToken },
      ]);
    });
    for (const [key, grants] of byKey) {
      const rows = await heldRows(key);
      const granted = requests.flatMap((r, i) => {
        const outcome = outcomes[i];
        return r.targetKey === key && won(outcome)
          ? [[outcome.rowSlot, r.leaseToken, String(outcome.fencingToken)]]
          : [];
      });
      expect(rows.map((row) => [row.slot, row.lease_token, row.fencing_token])).toEqual(
        granted.sort((x, y) => Number(x[0]) - Number(y[0])),
      );
      grants.sort((x, y) => x.slot - y.slot);
    }
    return byKey;
  }

  test('16 callers of one key and 4 keys × 4 in one turn: limit holders per key, distinct slots, one statement', async () => {
    const s = store();
    const before = await maxToken();
    const requests = [
      ...Array.from({ length: 16 }, () => request('turn:one')),
      ...Array.from({ length: 16 }, (_, i) => request(`turn:many:${i % 4}`)),
    ];
    const outcomes = await Promise.all(requests.map((r) => s.slots.tryAcquire(r, 4)));
    // One statement granted all 20 slots (each alone: 20).
    expect(await grantStatements('turn:')).toBe(1);
    expect(s.batchStats.slots.acquire).toMatchObject({ batches: 1, items: 32, largest: 32 });
    const byKey = await grantsByKey(requests, outcomes);
    expect([...byKey.keys()].sort()).toEqual(['turn:many:0', 'turn:many:1', 'turn:many:2', 'turn:many:3', 'turn:one']);
    for (const grants of byKey.values()) expect(grants.map((grant) => grant.slot)).toEqual([1, 2, 3, 4]);
    const tokens = outcomes.filter(won).map((outcome) => outcome.fencingToken);
    expect(tokens).toHaveLength(20);
    expect(new Set(tokens).size).toBe(20);
    for (const token of tokens) expect(token).toBeGreaterThan(before);
    // The 12 callers of the full key are refused (no error, no other limit in the way).
    expect(outcomes.filter((outcome) => !won(outcome))).toEqual(
      Array.from({ length: 12 }, () => ({ refused: true, holdLeftMs: null, heldLimit: null })),
    );

    // Released, the slots' rows stay: the next turn takes them again, each with a larger token than its slot's last.
    const last = new Map(
      requests.flatMap((r, i) => {
        const outcome = outcomes[i];
        return won(outcome) ? [[`${r.targetKey} ${outcome.rowSlot}`, outcome.fencingToken] as const] : [];
      }),
    );
    await Promise.all(
      requests.flatMap((r, i) => {
        const outcome = outcomes[i];
        return won(outcome) ? [s.release({ targetKey: r.targetKey, slot: outcome.rowSlot }, r.leaseToken, 5_000)] : [];
      }),
    );
    const again = requests.map((r) => request(r.targetKey));
    const second = await Promise.all(again.map((r) => s.slots.tryAcquire(r, 4)));
    const rebyKey = await grantsByKey(again, second);
    for (const [key, grants] of rebyKey) {
      expect(grants.map((grant) => grant.slot)).toEqual([1, 2, 3, 4]);
      for (const grant of grants) expect(grant.token).toBeGreaterThan(last.get(`${key} ${grant.slot}`)!);
    }
    expect(await grantStatements('turn:')).toBe(2);
  });

  test('a live waiter ahead and the callers’ priorities decide who of a batch gets the free slots', async () => {
    const s = store();
    const waiter = randomUUID();
    await s.waiters.enqueue('line:a', waiter, 5, undefined, 10_000);
    const requests = [0, 0, 0, 0, 9, 9].map((priority) => request('line:a', { priority }));
    const outcomes = await Promise.all(requests.map((r) => s.slots.tryAcquire(r, 4)));
    // The 9s pass the waiter (priority 5); the 0s may take only the free slots it leaves: 4 free, 1 ahead, 2 granted
    // before them — one more.
    expect(outcomes.map(won)).toEqual([true, false, false, false, true, true]);
    await grantsByKey(requests, outcomes);
    expect((await s.snapshot('line:a')).filter((row) => row.state === 'waiting')).toHaveLength(1);
    expect(await grantStatements('line:')).toBe(1);
  });

  test('another limit holding the key refuses the batch’s callers with it; a caller of another limit goes alone', async () => {
    const s = store();
    const three = await s.slots.tryAcquire(request('limits:held'), 3);
    expect(won(three)).toBe(true);
    const requests = [
      request('limits:held'),
      request('limits:held'),
      request('limits:mixed'),
      request('limits:mixed'),
      request('limits:mixed'),
    ];
    const limits = [4, 4, 4, 2, 4];
    const outcomes = await Promise.all(requests.map((r, i) => s.slots.tryAcquire(r, limits[i])));
    expect(outcomes[0]).toEqual({ refused: true, holdLeftMs: null, heldLimit: 3 });
    expect(outcomes[1]).toEqual({ refused: true, holdLeftMs: null, heldLimit: 3 });
    // The limit-4 callers of the mixed key are granted; the limit-2 caller, sent again alone, hears the limit 4.
    expect(outcomes.slice(2).map(won)).toEqual([true, false, true]);
    expect(outcomes[3]).toEqual({ refused: true, holdLeftMs: null, heldLimit: 4 });
    await grantsByKey(requests, outcomes);
  });

  test('a free slot row locked by another transaction is skipped, not waited for: the batch takes the others', async () => {
    const s = store();
    const first = [1, 2, 3, 4].map(() => request('locked:a'));
    const held = await Promise.all(first.map((r) => s.slots.tryAcquire(r, 4)));
    expect(held.every(won)).toBe(true);
    await db.admin.query(`UPDATE job_lease SET lease_token = NULL WHERE target_id = 'locked:a'`);
    const locker = await adminClient(db.url);
    try {
      await locker.query('BEGIN');
      await locker.query(`SELECT 1 FROM job_lease WHERE target_id = 'locked:a' AND slot = 1 FOR UPDATE`);
      const requests = [1, 2, 3, 4].map(() => request('locked:a'));
      // Answered while the lock is held: nobody waited for it (the last caller's retries skip it too).
      const outcomes = await Promise.all(requests.map((r) => s.slots.tryAcquire(r, 4)));
      expect(
        outcomes
          .filter(won)
          .map((outcome) => outcome.rowSlot)
          .sort(),
      ).toEqual([2, 3, 4]);
      expect(outcomes.filter((outcome) => !won(outcome))).toEqual([
        { refused: true, holdLeftMs: null, heldLimit: null },
      ]);
      await grantsByKey(requests, outcomes);
    } finally {
      await locker.query('ROLLBACK');
      await locker.end();
    }
  });

  test('an expired slot is taken over by a batch, with the previous owner reported; dead waiters go', async () => {
    const gone = store({ owner: 'gone-owner' });
    expect(won(await gone.slots.tryAcquire(request('takeover:a'), 2))).toBe(true);
    await db.admin.query(
      `UPDATE job_lease SET updated_at = updated_at - interval '1 hour' WHERE target_id = 'takeover:a'`,
    );
    const s = store();
    await s.waiters.enqueue('takeover:a', randomUUID(), 0, undefined, 10_000);
    await db.admin.query(`UPDATE job_lease_waiter SET heartbeat_at = heartbeat_at - interval '1 hour'
      WHERE target_id = 'takeover:a'`);
    const requests = [request('takeover:a'), request('takeover:a'), request('takeover:a')];
    const outcomes = await Promise.all(requests.map((r) => s.slots.tryAcquire(r, 2)));
    expect(s.batchStats.slots.acquire.largest).toBe(3);
    expect(outcomes[0]).toMatchObject({ rowSlot: 1, tookOver: true, previousOwner: 'gone-owner' });
    expect(outcomes[1]).toMatchObject({ rowSlot: 2, tookOver: false, previousOwner: null });
    expect(outcomes[2]).toEqual({ refused: true, holdLeftMs: null, heldLimit: null });
    await grantsByKey(requests, outcomes);
    const { rows } = await db.admin.query(
      `SELECT count(*)::int AS n FROM job_lease_waiter WHERE target_id = 'takeover:a'`,
    );
    expect(rows[0].n).toBe(0);
  });

  test('one bad row never fails the others: its caller alone gets the error', async () => {
    const s = store();
    const requests = [request('split:a'), request(`bad:${randomUUID()}`), request('split:a'), request('split:b')];
    const settled = await Promise.allSettled(requests.map((r) => s.slots.tryAcquire(r, 2)));
    expect(settled[1]).toMatchObject({ status: 'rejected', reason: { code: 'P0001' } });
    expect(s.batchStats.slots.acquire).toMatchObject({ largest: 4, splits: 1 });
    const granted = settled.flatMap((outcome) => {
      if (outcome.status !== 'fulfilled') return [];
      const value = outcome.value;
      return won(value) ? [value] : [];
    });
    expect(granted.map((slot) => slot.rowSlot).sort()).toEqual([1, 1, 2]);
  });

  test('through the service: 16 calls of limit 4 over two keys in one turn hold 4 slots each', async () => {
    const { service } = await db.open({ owner: 'svc' });
    const keys = ['svc:a', 'svc:b'];
    const leases = await Promise.all(
      Array.from({ length: 16 }, (_, i) => service.tryAcquire(keys[i % 2], { limit: 4 })),
    );
    const held = leases.filter((lease) => lease !== null);
    expect(held).toHaveLength(8);
    for (const key of keys) {
      expect(
        held
          .filter((lease) => lease.targetKey === key)
          .map((lease) => lease.slot)
          .sort(),
      ).toEqual([0, 1, 2, 3]);
    }
    expect(new Set(held.map((lease) => lease.fencingToken)).size).toBe(8);
    expect(await grantStatements('svc:')).toBe(1);
    await Promise.all(held.map((lease) => lease.release()));
    expect(await releaseStatements('svc:')).toBe(1);
  });

  test('semaphores’ slot releases in one turn go in one statement, each key waking its line; a stale token frees nothing', async () => {
    const s = store();
    const requests = [...[1, 2, 3, 4].map(() => request('free:a')), ...[1, 2].map(() => request('free:b'))];
    const outcomes = await Promise.all(requests.map((r) => s.slots.tryAcquire(r, 4)));
    expect(outcomes.every(won)).toBe(true);
    const listener = await adminClient(db.url);
    const heard: string[] = [];
    listener.on('notification', (message) => heard.push(message.payload ?? ''));
    try {
      await listener.query('LISTEN job_lease_next');
      const high = randomUUID();
      const low = randomUUID();
      await s.waiters.enqueue('free:a', low, 0, undefined, 10_000);
      await s.waiters.enqueue('free:a', high, 5, undefined, 10_000);
      const rows = requests.map((r, i) => ({
        targetKey: r.targetKey,
        slot: (outcomes[i] as AcquiredSlot).rowSlot,
        semaphore: true,
      }));
      // Two of free:a's four slots, both of free:b's, and a stale token of free:a's third slot.
      const released = await Promise.all([
        ...[0, 1, 4, 5].map((i) => s.release(rows[i], requests[i].leaseToken, 5_000)),
        s.release(rows[2], randomUUID(), 5_000),
      ]);
      expect(released).toEqual([true, true, true, true, false]);
      expect(await releaseStatements('free:')).toBe(1);
      expect(s.batchStats.slots.release).toMatchObject({ batches: 1, largest: 5 });
      expect((await heldRows('free:a')).map((row) => row.slot)).toEqual([3, 4]);
      expect(await heldRows('free:b')).toEqual([]);
      // Two slots of free:a free: both of its waiters are named, the higher priority first.
      await eventually(
        () => heard.length,
        (n) => n >= 2,
        'the wake-ups',
      );
      expect(heard).toEqual([`${high} free:a`, `${low} free:a`]);
      // A row that is not a semaphore's (a read-write lease's: no `semaphore`) is released alone, as before.
      await Promise.all(
        [2, 3].map((i) => s.release({ targetKey: 'free:a', slot: rows[i].slot }, requests[i].leaseToken, 5_000)),
      );
      expect(await releaseStatements('free:')).toBe(3);
      expect(s.batchStats.slots.release.batches).toBe(1);
    } finally {
      await listener.end();
    }
  });

  test('a slot row locked by another transaction costs only its own release: it goes alone and waits', async () => {
    const s = store();
    const requests = [request('rlock:a'), request('rlock:a')];
    const outcomes = (await Promise.all(requests.map((r) => s.slots.tryAcquire(r, 2)))) as AcquiredSlot[];
    const rows = outcomes.map((outcome) => ({ targetKey: 'rlock:a', slot: outcome.rowSlot, semaphore: true }));
    const locker = await adminClient(db.url);
    try {
      await locker.query('BEGIN');
      await locker.query(`SELECT 1 FROM job_lease WHERE target_id = 'rlock:a' AND slot = $1 FOR UPDATE`, [
        rows[0].slot,
      ]);
      let lockedDone = false;
      const lockedRelease = s.release(rows[0], requests[0].leaseToken, 5_000).finally(() => (lockedDone = true));
      const other = await s.release(rows[1], requests[1].leaseToken, 5_000);
      expect(other).toBe(true);
      expect(s.batchStats.slots.release.largest).toBe(2);
      expect(lockedDone).toBe(false);
      await locker.query('COMMIT');
      expect(await lockedRelease).toBe(true);
      expect(await heldRows('rlock:a')).toEqual([]);
    } finally {
      await locker.end();
    }
  });

  test('maxBatchSize 1: every slot acquisition goes alone', async () => {
    const s = store({ connections: { maxBatchSize: 1 } });
    const requests = Array.from({ length: 4 }, (_, i) => request(`alone:${i}`));
    const outcomes = await Promise.all(requests.map((r) => s.slots.tryAcquire(r, 4)));
    expect(outcomes.every(won)).toBe(true);
    await grantsByKey(requests, outcomes);
    expect(await grantStatements('alone:')).toBe(4);
  });
});
