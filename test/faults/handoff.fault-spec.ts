/**
 * Direct handoff under a kill (issue 27): a release hands the target to the head of its line in its own commit, and
 * the NOTIFY carries the grant. The waiter it names is SIGKILLed the moment that NOTIFY reaches it — after the grant
 * committed, before the waiter could confirm it. The grant must pass on to the next waiter within the dead waiter's
 * waiterTimeoutMs (not the lease timeout), under a higher fencing token, and fencing must hold.
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { createTestDatabase, eventually } from '../support/db.js';
import { check } from './support/checker.js';
import { connect, LEASE, ms, prepareTables, type Received, startScripted, type Worker } from './support/harness.js';
import { recordScenario } from './support/report.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

const KEY = 'handoff:k';
/** A lease timeout far above the waiter timeout: a pass-on bounded by the lease timeout could not meet the bound. */
const OPTIONS = mergeLeaseOptions(LEASE, {
  timing: { leaseTimeoutMs: 10_000, heartbeatIntervalMs: 500, waiterTimeoutMs: 1_500 },
});
/** Scheduling slack on a loaded 2-core machine. */
const ALLOWANCE = 1_500;

let db: Awaited<ReturnType<typeof createTestDatabase>>;
let admin: pg.Client;
let log: Received[];
let workers: Worker[];

beforeEach(async () => {
  db = await createTestDatabase('faults');
  await prepareTables(db.url, [KEY]);
  admin = await connect(db.url);
  log = [];
  workers = [];
});

afterEach(async () => {
  await Promise.all(workers.map((w) => w.end(2_000)));
  await admin.end();
  await db.drop();
});

async function start(name: string, options = OPTIONS): Promise<Worker> {
  const worker = await startScripted(name, db.url, log, options);
  workers.push(worker);
  return worker;
}

/** Resolves once KEY has `waiters` waiter rows and `name`'s LISTEN connection is up (the grant's NOTIFY reaches it). */
async function queuedAndListening(name: string, waiters: number): Promise<void> {
  await eventually(
    async () =>
      (
        await admin.query(
          `SELECT (SELECT count(*) FROM job_lease_waiter WHERE target_id = $1)::int AS queued,
             (SELECT count(*) FROM pg_stat_activity WHERE application_name = $2 || ':listen'
               AND query LIKE 'LISTEN%')::int AS listening`,
          [KEY, name],
        )
      ).rows[0] as { queued: number; listening: number },
    (row) => row.queued === waiters && row.listening === 1,
    `${name} queued and listening`,
  );
}

test('SIGKILL between grant and confirmation: the grant passes on within waiterTimeoutMs, fencing holds', async () => {
  const started = performance.now();
  const holder = await start('handoff-holder');
  // The doomed waiter sees its grant only through the NOTIFY it dies on: a poll of its own (every 150 ms here) landing
  // between the grant's commit and the kill would confirm the grant first, with the lease's 10 s (seen once in CI).
  const doomed = await start('handoff-doomed', mergeLeaseOptions(OPTIONS, { timing: { waitPollIntervalMs: 30_000 } }));
  const next = await start('handoff-next');
  const tokenA = BigInt(await holder.command<string>({ op: 'acquire', key: KEY }));
  expect(await holder.command({ op: 'write', key: KEY, opId: randomUUID() })).toBe('ack');

  const doomedCall = doomed.command({ op: 'acquire', key: KEY, waitTimeoutMs: 30_000, dieOnGrant: true }, 40_000);
  doomedCall.catch(() => undefined);
  await queuedAndListening('handoff-doomed', 1);
  const nextCall = next.command<string>({ op: 'acquire', key: KEY, waitTimeoutMs: 30_000 }, 40_000);
  await queuedAndListening('handoff-next', 2);

  const released = performance.now();
  await holder.command({ op: 'release', key: KEY });
  const { msg } = await doomed.waitFor((m) => m.t === 'grant-heard', 'the grant NOTIFY', 10_000);
  const grantToken = BigInt((msg as { fencingToken: string }).fencingToken);
  await doomed.exited;
  expect(doomed.running).toBe(false);

  const tokenC = BigInt(await nextCall);
  const passOnMs = performance.now() - released;
  expect(grantToken).toBeGreaterThan(tokenA);
  expect(tokenC).toBeGreaterThan(grantToken);
  expect(await next.command({ op: 'write', key: KEY, opId: randomUUID() })).toBe('ack');
  await next.command({ op: 'release', key: KEY });

  const result = await check(admin, log);
  const left = await admin.query(
    `SELECT 1 FROM job_lease WHERE target_id = $1 AND lease_token IS NOT NULL
       AND updated_at + lease_timeout_ms * interval '1 millisecond' > clock_timestamp()`,
    [KEY],
  );
  recordScenario({
    scenario: 'SIGKILL between grant and confirmation',
    faults: `waiter SIGKILLed on the grant NOTIFY (waiterTimeoutMs ${OPTIONS.timing?.waiterTimeoutMs}, leaseTimeoutMs ${OPTIONS.timing?.leaseTimeoutMs})`,
    writes: `${result.writes} / ${result.refused}`,
    violations: result.violations.length,
    takeoverMs: ms(passOnMs),
    wallMs: performance.now() - started,
  });
  expect(result.violations).toEqual([]);
  expect(left.rowCount).toBe(0);
  // Passed on once the dead waiter's grant lapsed: no sooner than its waiter timeout, far sooner than a lease timeout.
  expect(passOnMs).toBeGreaterThanOrEqual(OPTIONS.timing!.waiterTimeoutMs! - 100);
  expect(passOnMs).toBeLessThanOrEqual(OPTIONS.timing!.waiterTimeoutMs! + ALLOWANCE);
});
