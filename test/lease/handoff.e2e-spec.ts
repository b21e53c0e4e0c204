/**
 * Direct handoff (issue 27): a release grants the target to the head of its line in the same statement and commit,
 * and the head-only NOTIFY carries the grant (`<waiter id>/<fencing token> <key>`), so the woken waiter holds the
 * lease on arrival and only confirms it. A grant nobody confirms lives its waiter's waiterTimeoutMs (not a lease
 * timeout), and a waiter that gives up with a grant it never confirmed passes it on at once.
 */
import { interceptHeadWakeups } from '../../libs/lease/src/internal.js';
import { eventually, useTestDatabase } from '../support/db.js';
import { procsOf, untilAsleep } from '../priority/helpers.js';

const db = useTestDatabase('handoff');
const proc = procsOf(db);

interface Row {
  owner: string;
  lease_token: string | null;
  fencing_token: string;
}

async function leaseRow(key: string): Promise<Row | undefined> {
  const { rows } = await db.admin.query<Row>(
    'SELECT owner, lease_token::text AS lease_token, fencing_token::text AS fencing_token FROM job_lease WHERE target_id = $1',
    [key],
  );
  return rows[0];
}

async function waiterIds(key: string): Promise<string[]> {
  const { rows } = await db.admin.query<{ waiter_id: string }>(
    'SELECT waiter_id::text AS waiter_id FROM job_lease_waiter WHERE target_id = $1 ORDER BY seq',
    [key],
  );
  return rows.map((row) => row.waiter_id);
}

test('the release grants the head waiter in its own commit; the NOTIFY carries the grant', async () => {
  const key = 'handoff:direct';
  const holder = await proc('holder');
  const waiter = await proc('waiter', { timing: { waitPollIntervalMs: 20_000, waiterTimeoutMs: 30_000 } }, 1);
  const held = (await holder.service.tryAcquire(key))!;
  // The wake-up is held back: whatever the row says after the release, the waiter has not touched it.
  const heard: Array<{ waiterId: string; grant?: bigint; deliver: () => void }> = [];
  interceptHeadWakeups(waiter.service, (wakeup) => void heard.push(wakeup));
  const call = waiter.service.acquire(key, { onBusy: { wait: { timeoutMs: 60_000 } } });
  await untilAsleep(db.admin, key, waiter);
  const [waiterId] = await waiterIds(key);

  await held.release();
  const row = (await leaseRow(key))!;
  expect(row.owner).toBe(waiter.owner);
  expect(row.lease_token).toBe(waiterId);
  expect(BigInt(row.fencing_token)).toBeGreaterThan(held.fencingToken);
  expect(await waiterIds(key)).toEqual([]);
  await eventually(
    () => heard.length,
    (n) => n === 1,
    'the NOTIFY naming the waiter',
  );
  expect(heard[0].waiterId).toBe(waiterId);
  expect(heard[0].grant).toBe(BigInt(row.fencing_token));

  heard[0].deliver();
  const lease = await call;
  expect(lease.fencingToken).toBe(BigInt(row.fencing_token));
  // Confirmed: the lease now lives the waiter's own lease timeout, renewed by its heartbeat like any other.
  const { rows } = await db.admin.query<{ lease_timeout_ms: number }>(
    'SELECT lease_timeout_ms FROM job_lease WHERE target_id = $1',
    [key],
  );
  expect(rows[0].lease_timeout_ms).toBe(1_000);
  await lease.release();
  expect((await leaseRow(key))!.lease_token).toBeNull();
});

test('a lost grant NOTIFY: the poll finds the grant and confirms it (same fencing token)', async () => {
  const key = 'handoff:poll';
  const holder = await db.open({ owner: 'holder' });
  const waiter = await db.open({ owner: 'waiter', timing: { waitPollIntervalMs: 400, waiterTimeoutMs: 30_000 } });
  const held = (await holder.service.tryAcquire(key))!;
  interceptHeadWakeups(waiter.service, () => undefined);
  const call = waiter.service.acquire(key, { onBusy: { wait: { timeoutMs: 60_000 } } });
  await eventually(
    () => waiterIds(key),
    (ids) => ids.length === 1,
    'the waiter queued',
  );
  await held.release();
  const granted = (await leaseRow(key))!;
  const lease = await call;
  expect(lease.fencingToken).toBe(BigInt(granted.fencing_token));
  await lease.release();
});

test('a waiter that gives up with an unconfirmed grant passes it on to the next at once', async () => {
  const key = 'handoff:give-up';
  const holder = await proc('holder');
  // Long timeouts: only the pass-on of the giving-up waiter can hand the target over within the test's bound.
  const slow = { timing: { waitPollIntervalMs: 20_000, waiterTimeoutMs: 30_000, leaseTimeoutMs: 30_000 } };
  const first = await proc('first', slow, 1);
  const second = await proc('second', slow, 1);
  const held = (await holder.service.tryAcquire(key))!;
  interceptHeadWakeups(first.service, () => undefined);
  const abandoning = new AbortController();
  const gaveUp = first.service
    .acquire(key, { onBusy: { wait: { timeoutMs: 60_000 } }, signal: abandoning.signal })
    .catch((e) => e);
  await untilAsleep(db.admin, key, first);
  const next = second.service.acquire(key, { onBusy: { wait: { timeoutMs: 60_000 } } });
  await untilAsleep(db.admin, key, second);
  await held.release();
  expect((await leaseRow(key))!.owner).toBe(first.owner);
  const givenUp = performance.now();
  abandoning.abort(new Error('the client went away'));
  await gaveUp;
  const lease = await next;
  const passedOnMs = performance.now() - givenUp;
  expect(passedOnMs).toBeLessThan(3_000);
  expect(lease.fencingToken).toBeGreaterThan(held.fencingToken);
  await lease.release();
});

test('a confirmation that fails gives the waiter no lease: its next attempt confirms the grant before it lapses', async () => {
  const key = 'handoff:confirm-fails';
  // The first statement that gives the grant the holder's lease timeout (a confirmation) fails inside the server.
  await db.admin.query(`CREATE SEQUENCE confirm_attempts;
    CREATE FUNCTION fail_first_confirmation() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.target_id = '${key}' AND OLD.lease_token = NEW.lease_token
          AND OLD.lease_timeout_ms <> NEW.lease_timeout_ms AND nextval('confirm_attempts') = 1 THEN
        RAISE EXCEPTION 'confirmation refused by the test';
      END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER fail_first_confirmation BEFORE UPDATE ON job_lease
      FOR EACH ROW EXECUTE FUNCTION fail_first_confirmation();`);
  db.beforeDrop(() => db.admin.query('DROP TRIGGER fail_first_confirmation ON job_lease'));
  const holder = await proc('holder');
  // A grant lives the waiter timeout (3 s); the poll is far later: the waiter heartbeat (every 1 s), finding its row
  // gone with the grant, brings the next attempt.
  const waiter = await proc('waiter', { timing: { waitPollIntervalMs: 20_000, waiterTimeoutMs: 3_000 } }, 1);
  const held = (await holder.service.tryAcquire(key))!;
  const call = waiter.service.acquire(key, { onBusy: { wait: { timeoutMs: 60_000 } } });
  await untilAsleep(db.admin, key, waiter);
  await held.release();
  const granted = (await leaseRow(key))!;
  expect(granted.owner).toBe(waiter.owner);
  const lease = await call;
  const { rows } = await db.admin.query<{ lease_token: string; lease_timeout_ms: number; attempts: string }>(
    `SELECT lease_token::text AS lease_token, lease_timeout_ms,
       (SELECT last_value::text FROM confirm_attempts) AS attempts FROM job_lease WHERE target_id = $1`,
    [key],
  );
  // The same grant (its fencing token), held only once the second attempt confirmed it (the sequence counts the
  // statements that set the holder's timeout; renewals write the same value): the row lives the holder's timeout.
  expect(lease.fencingToken).toBe(BigInt(granted.fencing_token));
  expect(rows).toEqual([{ lease_token: lease.token, lease_timeout_ms: 1_000, attempts: '2' }]);
  await lease.release();
});
