/**
 * The fault schedule's checker against histories written by hand: each guarantee broken on purpose must be flagged
 * under its own invariant, and the same history without the defect must pass. The schedule's two negative controls
 * prove the whole loop (workload, faults, checker) end to end; these prove each check of the checker on its own, in
 * seconds, inside `npm test`.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { Received } from '../faults/support/harness.js';
import type { ModesContext } from './checker-modes.js';
import { checkRun, LOAD_ALLOWANCE_MS, type Invariant } from './checker.js';
import type { ScheduleMessage } from './protocol.js';
import { useCheckerDatabase } from './checker-database.js';

const { as } = useCheckerDatabase('schedule_checker', ['k', 'q']);

/** What an acquire statement does to the row: a new lease token, `token`, `owner`; a first grant inserts it. */
async function grant(
  c: pg.Client,
  key: string,
  token: bigint,
  owner: string,
  priority = 0,
  leaseToken: string = randomUUID(),
): Promise<void> {
  await c.query(
    `INSERT INTO job_lease AS l (target_id, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at,
       updated_at, hold_ms)
     VALUES ($1, $5::uuid, $2, $3, $4, 1500, clock_timestamp(), clock_timestamp(), 0)
     ON CONFLICT (target_id, slot) DO UPDATE SET lease_token = EXCLUDED.lease_token, fencing_token = EXCLUDED.fencing_token,
       owner = EXCLUDED.owner, priority = EXCLUDED.priority, acquired_at = EXCLUDED.acquired_at,
       updated_at = EXCLUDED.updated_at`,
    [key, token.toString(), owner, priority, leaseToken],
  );
}

const release = (c: pg.Client, key: string) =>
  c.query('UPDATE job_lease SET lease_token = NULL WHERE target_id = $1', [key]);
const renew = (c: pg.Client, key: string) =>
  c.query('UPDATE job_lease SET updated_at = clock_timestamp() WHERE target_id = $1', [key]);
/** The row ran out (last renewed 2 s ago, its lease 1.5 s), before another process takes it over (not logged). */
const expire = (holder: pg.Client, key: string) =>
  holder.query(`UPDATE job_lease SET updated_at = clock_timestamp() - interval '2 seconds' WHERE target_id = $1`, [
    key,
  ]);

/** A committed fenced write of `token` on `key` (the row the workers append), and the worker's report of it. */
async function write(c: pg.Client, key: string, token: bigint, worker: string): Promise<Received<ScheduleMessage>> {
  const opId = randomUUID();
  await c.query(`INSERT INTO fault_history VALUES ($1, $2, $3, $4, nextval('fault_commit_seq'), clock_timestamp())`, [
    opId,
    key,
    token.toString(),
    worker,
  ]);
  await c.query('UPDATE fault_counter SET n = n + 1 WHERE target = $1', [key]);
  return report(worker, { t: 'write', opId, key, fencingToken: token.toString(), outcome: 'ack', afterLoss: false });
}

/** Queues waiter rows as the enqueue statement would (landed and renewed now, live `timeoutMs`). */
async function waiters() {
  const admin = await as('fault-harness');
  return (key: string, owner: string, priority: number, seq: number, timeoutMs = 10_000) =>
    admin.query(
      `INSERT INTO job_lease_waiter VALUES ($1, gen_random_uuid(), $2, $3, $4, clock_timestamp(), $5,
         clock_timestamp())`,
      [key, owner, priority, timeoutMs, seq],
    );
}

const report = (worker: string, msg: ScheduleMessage): Received<ScheduleMessage> => ({ at: 0, worker, msg });
const granted = (worker: string, key: string, token: bigint) =>
  report(worker, { t: 'grant', key, fencingToken: token.toString(), owner: worker, at: 0 });

async function violations(
  log: Received<ScheduleMessage>[] = [],
  pauses = new Map<string, Array<[number, number]>>(),
  context?: ModesContext,
) {
  const admin = await as('fault-harness');
  const { violations: found } = await checkRun(admin, log, pauses, context);
  return found.map((v) => `${v.invariant}: ${v.detail}`);
}

const only = (invariant: Invariant) => expect.arrayContaining([expect.stringMatching(new RegExp(`^${invariant}: `))]);

test('a clean history: grants rising, writes inside their leases, releases and renewals by the holder', async () => {
  const a = await as('w0.1');
  const b = await as('w1.1');
  const log = [granted('w0.1', 'k', 10n)];
  await grant(a, 'k', 10n, 'w0.1');
  await renew(a, 'k');
  log.push(await write(a, 'k', 10n, 'w0.1'));
  await release(a, 'k');
  await grant(b, 'k', 11n, 'w1.1');
  log.push(granted('w1.1', 'k', 11n), await write(b, 'k', 11n, 'w1.1'));
  expect(await violations(log)).toEqual([]);
});

test('tokens rising per key: a grant with a smaller token than an earlier one of the key', async () => {
  const a = await as('w0.1');
  await grant(a, 'k', 10n, 'w0.1');
  await release(a, 'k');
  await grant(a, 'k', 9n, 'w0.1');
  expect(await violations()).toEqual([expect.stringMatching(/^tokens rising per key: k: token 9 granted to w0.1/)]);
});

test('tokens rising per key: a grant a worker reports that the server never made', async () => {
  expect(await violations([granted('w0.1', 'k', 5n)])).toEqual([
    expect.stringMatching(/^tokens rising per key: w0.1 was granted k with token 5, which the server granted never/),
  ]);
});

test('fenced exclusion: a write of a released lease, and a write of an older token after a newer grant', async () => {
  const a = await as('w0.1');
  const b = await as('w1.1');
  await grant(a, 'k', 10n, 'w0.1');
  await release(a, 'k');
  const late = await write(a, 'k', 10n, 'w0.1');
  await grant(b, 'q', 20n, 'w1.1');
  await expire(b, 'q');
  await grant(a, 'q', 21n, 'w0.1'); // a takeover (of an expired lease)
  const stale = await write(b, 'q', 20n, 'w1.1');
  const found = await violations([late, stale]);
  expect(found).toEqual(
    expect.arrayContaining([
      expect.stringMatching(
        /^fenced exclusion: k: write #\d+ of token 10 \(w0.1\) committed after that lease was released/,
      ),
      expect.stringMatching(
        /^fenced exclusion: q: write #\d+ of token 20 \(w1.1\) committed after token 21 was granted/,
      ),
    ]),
  );
  expect(found.every((v) => v.startsWith('fenced exclusion: '))).toBe(true);
});

test('fenced exclusion and nothing lost, as the fault suite judges them: order, counters, acknowledged writes', async () => {
  const a = await as('w0.1');
  await grant(a, 'k', 10n, 'w0.1');
  await release(a, 'k');
  await grant(a, 'k', 11n, 'w0.1');
  const newer = await write(a, 'k', 11n, 'w0.1');
  await a.query('UPDATE fault_counter SET n = n + 5');
  const missing = report('w0.1', {
    t: 'write',
    opId: randomUUID(),
    key: 'k',
    fencingToken: '11',
    outcome: 'ack',
    afterLoss: false,
  });
  const found = await violations([newer, missing]);
  expect(found).toEqual(only('fenced exclusion'));
  expect(found).toEqual(expect.arrayContaining([expect.stringMatching(/lost update/)]));
  expect(found).toEqual(only('nothing lost'));
});

test('no stale hands: a renewal and a release of a lease by another process, a renewal of an expired row', async () => {
  const a = await as('w0.1');
  const b = await as('w1.1');
  await grant(a, 'k', 10n, 'w0.1');
  await renew(b, 'k');
  await release(b, 'k');
  await grant(a, 'q', 11n, 'w0.1');
  await a.query(`UPDATE job_lease SET updated_at = clock_timestamp() - interval '5 seconds' WHERE target_id = 'q'`);
  await renew(a, 'q');
  const found = await violations();
  expect(found).toEqual([
    expect.stringMatching(/^no stale hands: k: w0.1's lease \(token 10\) renewed by w1.1/),
    expect.stringMatching(/^no stale hands: k: w0.1's lease \(token 10\) released by w1.1/),
    expect.stringMatching(/^no stale hands: q: w0.1 renewed its lease \(token 11\) \d+ ms after it had expired/),
  ]);
});

test('no stale hands: an expired row granted again to the same lease token is a grant, not a renewal', async () => {
  // A waiter's lease token is its id, the same in each of its attempts: an attempt granted whose answer was lost
  // leaves the row with that token; a later attempt past its expiry takes it with a new fencing token.
  const a = await as('w0.1');
  const waiterId = randomUUID();
  await grant(a, 'k', 10n, 'w0.1', 0, waiterId);
  await a.query(`UPDATE job_lease SET updated_at = clock_timestamp() - interval '5 seconds' WHERE target_id = 'k'`);
  await grant(a, 'k', 12n, 'w0.1', 0, waiterId);
  expect(await violations([granted('w0.1', 'k', 12n)])).toEqual([]);
});

test('waits settle within their bound: a wait past it is flagged, unless its process could not run meanwhile', async () => {
  const wait = (startedAt: number, endedAt: number, stalledMs = 0) =>
    report('w0.1', {
      t: 'op',
      op: 'acquire',
      outcome: 'timeout',
      wait: { key: 'k', priority: 1, boundMs: 500, startedAt, endedAt, stalledMs },
    });
  const late = 500 + 1_000 + LOAD_ALLOWANCE_MS + 200;
  const pauses = new Map<string, Array<[number, number]>>([['w0.1', [[10_000, 12_000]]]]);
  // Late; late but SIGSTOPped 2 s meanwhile; late but its event loop 2 s late meanwhile (starved of CPU).
  expect(
    await violations([wait(0, late), wait(10_000, 10_000 + late), wait(20_000, 20_000 + late, 2_000)], pauses),
  ).toEqual([
    expect.stringMatching(/^waits settle within their bound: w0.1: acquire of k \(priority 1, bound 500 ms\)/),
  ]);
});

test('priority order: a newcomer granted past a live waiter of its priority; a waiter past a higher one', async () => {
  const queue = await waiters();
  await queue('k', 'w1.1', 0, 1);
  await queue('q', 'w1.1', 3, 1);
  await queue('q', 'w0.1', 1, 2);
  // Landed and renewed long enough before the grants to be in their snapshots, and live long after.
  await new Promise((resolve) => setTimeout(resolve, 600));
  const a = await as('w0.1');
  await grant(a, 'k', 10n, 'w0.1', 0);
  // The grantee's own row is deleted by its grant's transaction (the acquire statement deletes it in a CTE).
  await a.query('BEGIN');
  await a.query(`DELETE FROM job_lease_waiter WHERE target_id = 'q' AND owner = 'w0.1'`);
  await grant(a, 'q', 11n, 'w0.1', 1);
  await a.query('COMMIT');
  expect(await violations()).toEqual([
    expect.stringMatching(
      /^priority order: k: granted to w0.1 \(priority 0, a newcomer, #\d+\) past live waiter w1.1 \(priority 0, place 1/,
    ),
    expect.stringMatching(
      /^priority order: q: granted to w0.1 \(priority 1, place 2, #\d+\) past live waiter w1.1 \(priority 3, place 1/,
    ),
  ]);
});

test('priority order: no violation when the waiters are behind the grantee, dead, or landed during the grant', async () => {
  const queue = await waiters();
  await queue('k', 'w1.1', 0, 5);
  await queue('k', 'w2.1', 2, 1, 100); // dead by the time of the grant
  await new Promise((resolve) => setTimeout(resolve, 600));
  await queue('k', 'w3.1', 9, 6); // landed just before the grant: maybe not in its snapshot
  const a = await as('w0.1');
  await a.query(`INSERT INTO job_lease_waiter VALUES ('k', gen_random_uuid(), 'w0.1', 1, 10000,
    clock_timestamp(), 4, clock_timestamp())`);
  await a.query('BEGIN');
  await a.query(`DELETE FROM job_lease_waiter WHERE target_id = 'k' AND owner = 'w0.1'`);
  await grant(a, 'k', 10n, 'w0.1', 1);
  await a.query('COMMIT');
  expect(await violations()).toEqual([]);
});

test('priority order: a waiter that expired while the grant statement was stalled in the server may be passed', async () => {
  // The acquire statement judges a waiter's liveness by the clock when it reads the line, anywhere between the
  // statement's start and its write: under load a statement stalls for a second, and a waiter live at the start
  // may be dead by then. Live at the write (its row not renewed meanwhile) is what it must have been at the read.
  const queue = await waiters();
  await queue('k', 'w1.1', 0, 1, 1_200);
  await queue('q', 'w1.1', 0, 1, 10_000);
  await new Promise((resolve) => setTimeout(resolve, 600));
  const a = await as('w0.1');
  const stalledGrant = (key: string, token: bigint) =>
    a.query(
      `WITH stall AS MATERIALIZED (SELECT pg_sleep(1))
       INSERT INTO job_lease (target_id, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at,
         updated_at, hold_ms)
       SELECT $1, gen_random_uuid(), $2, 'w0.1', 0, 1500, clock_timestamp(), clock_timestamp(), 0 FROM stall`,
      [key, token.toString()],
    );
  await Promise.all([stalledGrant('k', 10n), stalledGrant('q', 11n)]);
  // k's waiter had 600 ms to live at the statements' start and was dead at their write; q's lived on.
  expect(await violations()).toEqual([
    expect.stringMatching(/^priority order: q: granted to w0.1 \(priority 0, a newcomer, #\d+\) past live waiter w1.1/),
  ]);
});

test('priority order: a waiter whose row just went keeps its place; one whose row went 5 s before does not', async () => {
  const queue = await waiters();
  await queue('k', 'w1.1', 0, 5);
  await queue('q', 'w1.1', 0, 5);
  await queue('k', 'w0.1', 0, 1);
  await queue('q', 'w0.1', 0, 1);
  // On q, w0.1's row went long before the grant (a wait that ended); on k, just before it (another process's grant
  // statement removed it as dead).
  const a = await as('w0.1');
  await a.query(`DELETE FROM job_lease_waiter WHERE target_id = 'q' AND owner = 'w0.1'`);
  await a.query(`UPDATE sched_waiter_gone SET at = at - interval '6 seconds'`);
  await new Promise((resolve) => setTimeout(resolve, 600));
  const other = await as('w2.1');
  await other.query(`DELETE FROM job_lease_waiter WHERE target_id = 'k' AND owner = 'w0.1'`);
  await grant(a, 'k', 10n, 'w0.1', 0);
  await grant(a, 'q', 11n, 'w0.1', 0);
  expect(await violations()).toEqual([
    expect.stringMatching(
      /^priority order: q: granted to w0.1 \(priority 0, a newcomer, #\d+\) past live waiter w1.1 .* gone in the 5 s before: none$/,
    ),
  ]);
});

// --- the modes where two features meet (issue 38) ----------------------------------------------------------------

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const stickyCall = (worker: string, startedAt: number, endedAt: number, token = '7') =>
  report(worker, { t: 'sticky', key: 's0', fencingToken: token, startedAt, endedAt });
const joined = (worker: string, key: string, startedAt: number, endedAt: number, outcome: string, token?: bigint) =>
  report(worker, {
    t: 'join',
    via: 'run',
    key,
    outcome,
    fencingToken: token?.toString(),
    startedAt,
    endedAt,
  });

test('sticky: one call at a time: two calls of one process that overlap are flagged, calls one after another pass', async () => {
  const log = [
    stickyCall('w0.1', 1_000, 1_300),
    stickyCall('w0.1', 1_300, 1_500), // begins as the one before ends: one at a time
    stickyCall('w0.1', 1_450, 1_600), // begins while the one before runs
    stickyCall('w1.1', 1_000, 1_600), // another process (its term is judged by the fenced writes)
  ];
  expect(await violations(log)).toEqual([
    expect.stringMatching(
      /^sticky: one call at a time: w0.1: a sticky call of s0 \(token 7\) began 50 ms before the one before it/,
    ),
  ]);
});

const multiWork = (worker: string, keys: string[], startedAt: number, lastHeldAt?: number) =>
  report(worker, { t: 'multi', keys, fencingTokens: keys.map((_, at) => String(at + 1)), startedAt, lastHeldAt });

test('multi-key: no two holders overlap on a key: overlapping windows on a shared key are flagged, others pass', async () => {
  const log = [
    multiWork('w0.1', ['h0', 'h1'], 1_000, 1_300),
    multiWork('w1.1', ['h1', 'h2'], 1_300, 1_500), // begins on h1 as the one before last saw it held: one at a time
    multiWork('w2.1', ['h3', 'h4'], 1_000, 1_600), // other keys
    multiWork('w3.1', ['h0', 'h2'], 1_450, 1_700), // h2 while w1.1 still held it
    multiWork('w0.1', ['h3', 'h5'], 1_100, undefined), // never saw its leases held: no window
  ];
  expect(await violations(log)).toEqual([
    expect.stringMatching(
      /^multi-key: no two holders overlap on a key: h2: w3.1's multi-key work \(token 2\) began 50 ms before w1.1's/,
    ),
  ]);
});

const rwWork = (worker: string, mode: 'shared' | 'exclusive', token: number, startedAt: number, lastHeldAt?: number) =>
  report(worker, { t: 'rw', key: 'rw0', mode, fencingToken: String(token), startedAt, lastHeldAt });

test('read-write: a writer overlaps no other holder: readers together pass, a writer beside anyone is flagged', async () => {
  const log = [
    rwWork('w0.1', 'shared', 1, 1_000, 1_300),
    rwWork('w1.1', 'shared', 2, 1_100, 1_400), // readers together
    rwWork('w2.1', 'exclusive', 3, 1_400, 1_600), // begins as the last reader last saw its lease held
    rwWork('w3.1', 'shared', 4, 1_550, 1_700), // beside the writer
    rwWork('w0.1', 'exclusive', 5, 1_690, 1_800), // beside that reader
    rwWork('w1.1', 'exclusive', 6, 1_750, undefined), // never saw its lease held: no window
  ];
  expect(await violations(log)).toEqual([
    "read-write: a writer overlaps no other holder: rw0: w3.1's reader (token 4) began 50 ms before w2.1's writer (token 3) last saw its lease held",
    "read-write: a writer overlaps no other holder: rw0: w0.1's writer (token 5) began 10 ms before w3.1's reader (token 4) last saw its lease held",
  ]);
});

test('join: the run it waited for: a run that ended before the join, one granted after it, one never granted', async () => {
  const a = await as('w0.1');
  const b = await as('w1.1');
  const early = Date.now();
  await sleep(300);
  await grant(a, 'k', 10n, 'w0.1');
  const during = Date.now();
  await sleep(300);
  await release(a, 'k');
  await sleep(300);
  const after = Date.now();
  // q: a run ended by the next grant (a handoff carries no release): joined while it ran, it passes.
  await grant(a, 'q', 20n, 'w0.1');
  const held = Date.now();
  await sleep(300);
  await grant(a, 'q', 21n, 'w1.1');
  await release(b, 'q');
  const log = [
    granted('w0.1', 'k', 10n),
    granted('w0.1', 'q', 20n),
    granted('w1.1', 'q', 21n),
    joined('w2.1', 'k', during - 50, during + 50, 'joined', 10n),
    joined('w2.1', 'q', held, held + 100, 'joined-error', 20n),
    joined('w2.1', 'k', after, after + 50, 'joined', 10n),
    joined('w2.1', 'k', early - 500, early, 'joined', 10n),
    joined('w2.1', 'k', during, during + 10, 'joined', 99n),
  ];
  expect(await violations(log)).toEqual([
    expect.stringMatching(
      /^join: the run it waited for: w2.1: a join of k \(run\) .* settled 'joined' with the outcome of token 10 \(w0.1\), ended \d+ ms before the join began/,
    ),
    expect.stringMatching(
      /^join: the run it waited for: w2.1: a join of k .* with the outcome of token 10 \(w0.1\), granted \d+ ms after the join ended/,
    ),
    expect.stringMatching(
      /^join: the run it waited for: w2.1: a join of k .* token 99, which the server never granted on k/,
    ),
  ]);
});

test('join: the run it waited for: a run ends when its release commits, not when the release statement ran', async () => {
  // A Sync or COMMIT the network held back: the release's row is written, and other sessions still see the run
  // holding the key (a joiner reading then finds it, with its outcome) until the transaction commits.
  const a = await as('w0.1');
  await grant(a, 'late', 30n, 'w0.1');
  await a.query('BEGIN');
  await release(a, 'late');
  await sleep(300);
  const stillHeld = Date.now();
  await sleep(50);
  await a.query('COMMIT');
  const log = [granted('w0.1', 'late', 30n), joined('w2.1', 'late', stillHeld, stillHeld + 20, 'joined', 30n)];
  expect(await violations(log)).toEqual([]);
});

test('join: refused on a drained key: a join settled otherwise once the drain reached its process is flagged', async () => {
  const a = await as('w0.1');
  await grant(a, 'k', 10n, 'w0.1'); // a holder keeps its lease through a drain: its run is there to join
  await sleep(300);
  // The drain reached every process by now (its commit, a refresh, a statement in flight, the load allowance).
  const from = Date.now() - 2_000 - LOAD_ALLOWANCE_MS;
  const readyAt = new Map([
    ['w2.1', 0],
    ['w3.1', from + 1_000],
    ['w4.1', 0],
  ]);
  const context: ModesContext = { drains: [{ key: 'k', from, to: from + 9_000 }], readyAt };
  const reached = from + 2_000 + LOAD_ALLOWANCE_MS;
  const log = [
    granted('w0.1', 'k', 10n),
    joined('w2.1', 'k', reached + 100, reached + 200, 'joined', 10n), // flagged: a value on a drained key
    joined('w2.1', 'k', reached + 300, reached + 2_300, 'timeout'), // flagged: a wait
    joined('w2.1', 'k', reached + 400, reached + 400, 'drained'),
    joined('w2.1', 'k', reached - 200, reached - 100, 'joined', 10n), // the drain may not have reached it yet
    joined('w2.1', 'k', from + 8_900, from + 9_100, 'joined', 10n), // ended after the undrain was asked
    joined('w3.1', 'k', reached + 100, reached + 200, 'joined', 10n), // its process started late
    joined('w4.1', 'k', reached + 100, reached + 200, 'joined', 10n), // its process was stopped meanwhile
    joined('w2.1', 'q', reached + 100, reached + 200, 'own', undefined), // another key
  ];
  const pauses = new Map<string, Array<[number, number]>>([['w4.1', [[from + 1_000, from + 2_000]]]]);
  expect(await violations(log, pauses, context)).toEqual([
    expect.stringMatching(
      /^join: refused on a drained key: w2.1: a join of k .* settled 'joined' \(token 10\), \d+ ms after k was drained/,
    ),
    expect.stringMatching(
      /^join: refused on a drained key: w2.1: a join of k .* settled 'timeout', \d+ ms after k was drained/,
    ),
  ]);
});

test('local safety: a takeover while the replaced holder still saw its lease held is flagged; after it, or a handoff, passes', async () => {
  const a = await as('w0.1');
  const b = await as('w1.1');
  const held = (key: string, token: bigint, lastHeldAt: number) =>
    report('w0.1', { t: 'held', key, fencingToken: token.toString(), lastHeldAt });
  await grant(a, 'k', 10n, 'w0.1');
  await grant(a, 'q', 20n, 'w0.1');
  await grant(a, 'r', 30n, 'w0.1');
  const before = Date.now();
  await sleep(50);
  await expire(a, 'k');
  await expire(a, 'q');
  await grant(b, 'k', 11n, 'w1.1'); // a takeover by another process
  await grant(b, 'q', 21n, 'w1.1');
  await grant(a, 'r', 31n, 'w1.1'); // a handoff: the holder's own release granted the waiter
  const after = Date.now() + 1;
  const log = [
    granted('w0.1', 'k', 10n),
    granted('w0.1', 'q', 20n),
    granted('w0.1', 'r', 30n),
    granted('w1.1', 'k', 11n),
    granted('w1.1', 'q', 21n),
    granted('w1.1', 'r', 31n),
    held('k', 10n, after),
    held('q', 20n, before),
    held('r', 30n, after),
  ];
  expect(await violations(log)).toEqual([
    expect.stringMatching(
      /^local safety: k: granted to w1.1 \(token 11, #\d+\) while w0.1 still saw its lease \(token 10\) held, \d+ ms later/,
    ),
  ]);
});
