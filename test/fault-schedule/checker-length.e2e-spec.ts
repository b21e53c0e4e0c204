/**
 * The lease-length checks of the fault schedule's checker (checker-length.ts) against histories written by hand in the
 * lease table, as the workers' statements would leave them: each broken on purpose must be flagged under its own
 * invariant, the same history without the defect must pass. (The schedule's `renew-one-length` control proves the
 * whole loop end to end.)
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { Received } from '../faults/support/harness.js';
import { checkRun } from './checker.js';
import type { ScheduleMessage } from './protocol.js';
import { useCheckerDatabase } from './checker-database.js';

const { as } = useCheckerDatabase('schedule_checker_length', ['k', 'q']);

/**
 * A grant of `key` to `owner` with a lease of `leaseMs`, as the acquire statement writes it (a takeover when the row
 * is held).
 */
async function grant(c: pg.Client, key: string, token: bigint, owner: string, leaseMs: number): Promise<void> {
  await c.query(
    `INSERT INTO job_lease AS l (target_id, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at,
       updated_at, hold_ms)
     VALUES ($1, $2::uuid, $3, $4, 0, $5, clock_timestamp(), clock_timestamp(), 0)
     ON CONFLICT (target_id, slot) DO UPDATE SET lease_token = EXCLUDED.lease_token,
       fencing_token = EXCLUDED.fencing_token, owner = EXCLUDED.owner, lease_timeout_ms = EXCLUDED.lease_timeout_ms,
       acquired_at = EXCLUDED.acquired_at, updated_at = EXCLUDED.updated_at`,
    [key, randomUUID(), token.toString(), owner, leaseMs],
  );
}

/** A renewal as the heartbeat writes it: the time, and the length it was given. */
const renew = (c: pg.Client, key: string, leaseMs: number) =>
  c.query('UPDATE job_lease SET updated_at = clock_timestamp(), lease_timeout_ms = $2 WHERE target_id = $1', [
    key,
    leaseMs,
  ]);

/** The row last renewed `agoMs` ago, by its holder (a live row's renewal that keeps its length is not logged). */
const renewedAgo = (c: pg.Client, key: string, agoMs: number) =>
  c.query(`UPDATE job_lease SET updated_at = clock_timestamp() - $2 * interval '1 millisecond' WHERE target_id = $1`, [
    key,
    agoMs,
  ]);

const asked = (worker: string, key: string, token: bigint, leaseTimeoutMs: number): Received<ScheduleMessage> => ({
  at: 0,
  worker,
  msg: { t: 'length', key, fencingToken: token.toString(), leaseTimeoutMs },
});

async function violations(log: Received<ScheduleMessage>[] = []): Promise<string[]> {
  const { violations: found } = await checkRun(await as('fault-harness'), log, new Map());
  return found.map((v) => `${v.invariant}: ${v.detail}`);
}

test('lease length: each lease its own — a renewal that gives a lease another length is flagged', async () => {
  const a = await as('w0.1');
  // k: asked 4,000 ms, granted and renewed with it: clean. q: asked 4,000 ms, renewed with 1,000 (another's length).
  await grant(a, 'k', 10n, 'w0.1', 4_000);
  await renew(a, 'k', 4_000);
  await grant(a, 'q', 11n, 'w0.1', 4_000);
  await renew(a, 'q', 1_000);
  const log = [asked('w0.1', 'k', 10n, 4_000), asked('w0.1', 'q', 11n, 4_000)];
  expect(await violations(log)).toEqual([
    expect.stringMatching(
      /^lease length: each lease its own: q: the row of token 11 \(#\d+\) written by w0.1 .* a length of 1000 ms, not the 4000 ms its call asked \(it had 4000 ms\)$/,
    ),
  ]);
});

test('lease length: each lease its own — a grant without the asked length, a module lease given a call length', async () => {
  const a = await as('w0.1');
  // k: asked 1,000 ms, granted with the module's 1,500. q: asked nothing (the module's), renewed with 4,000.
  await grant(a, 'k', 10n, 'w0.1', 1_500);
  await grant(a, 'q', 11n, 'w0.1', 1_500);
  await renew(a, 'q', 4_000);
  const found = await violations([asked('w0.1', 'k', 10n, 1_000)]);
  expect(found).toEqual([
    expect.stringMatching(
      /^lease length: each lease its own: k: the row of token 10 .* granted to w0.1 with a length of 1500 ms, not the 1000 ms/,
    ),
    expect.stringMatching(
      /^lease length: each lease its own: q: the row of token 11 .* a length of 4000 ms, not the 1500 ms/,
    ),
  ]);
});

test('lease length: no takeover before it ran out — by its own length, not the module’s', async () => {
  const a = await as('w0.1');
  const b = await as('w1.1');
  // k: a 4,000 ms lease last renewed 2,000 ms ago (expired by the module's 1,500) taken over: flagged.
  await grant(a, 'k', 10n, 'w0.1', 4_000);
  await renewedAgo(a, 'k', 2_000);
  await grant(b, 'k', 12n, 'w1.1', 1_500);
  // q: a 1,000 ms lease last renewed 1,200 ms ago (live by the module's 1,500) taken over: it had run out, clean.
  await grant(a, 'q', 11n, 'w0.1', 1_000);
  await renewedAgo(a, 'q', 1_200);
  await grant(b, 'q', 13n, 'w1.1', 1_500);
  const log = [asked('w0.1', 'k', 10n, 4_000), asked('w0.1', 'q', 11n, 1_000)];
  expect(await violations(log)).toEqual([
    expect.stringMatching(
      /^lease length: no takeover before it ran out: k: granted to w1.1 \(token 12, #\d+\) while w0.1's lease \(a length of 4000 ms\) still had \d+ ms to live$/,
    ),
  ]);
});

test('lease length: a grant its call never worked with is judged by the call that asked, while it ran', async () => {
  const a = await as('w0.1');
  // k and q: granted with the waiter's 1,500 ms, then confirmed with 4,000 by w0.1, no `length` report (the call's
  // wait ended first). k's call of w0.1 on k asked 4,000 and ran then: clean. q's call had ended 10 s before: flagged.
  const now = Date.now();
  await grant(a, 'k', 10n, 'w0.1', 1_500);
  await renew(a, 'k', 4_000);
  await grant(a, 'q', 11n, 'w0.1', 1_500);
  await renew(a, 'q', 4_000);
  const call = (id: number, key: string, startedAt: number, endedAt?: number): Received<ScheduleMessage> => ({
    at: 0,
    worker: 'w0.1',
    msg: { t: 'length-call', id, key, leaseTimeoutMs: 4_000, startedAt, endedAt },
  });
  const log = [call(1, 'k', now - 500), call(1, 'k', now - 500, now + 500), call(2, 'q', now - 20_000, now - 10_000)];
  expect(await violations(log)).toEqual([
    expect.stringMatching(
      /^lease length: each lease its own: q: the row of token 11 .* a length of 4000 ms, not the 1500 ms/,
    ),
  ]);
});
