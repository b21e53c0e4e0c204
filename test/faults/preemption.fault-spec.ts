/**
 * Preemption storms and joins under kills and pauses (issue 24 part 3): 4 processes × 4 loops on 3 keys; a third of
 * the leases preempt (priority 3 or 6, grace 300 ms), a third are joinable runs, the rest wait in line at priority 0
 * (a third of those ignore their signal for 600 ms: taken over at the grace's end); meanwhile, every 800 ms, a process
 * is SIGSTOPped past its lease timeout or SIGKILLed (and replaced). Checked, besides
 * the suite's invariants (support/checker.ts):
 *
 * - fenced exclusion against the grants themselves: a trigger numbers every grant of a lease row in the same
 *   sequence the fenced writes draw from (both under the row lock), so "a write of token t committed after a grant
 *   of a higher token on its key" is a violation — the preempted holder's write after the preemptor's grant, exactly;
 * - every joiner got the outcome of a run that really committed: its op id is in the history, under the token the
 *   joiner was told;
 * - nothing left held: once the processes are gone and a lease timeout has passed, no live lease and no live waiter.
 *
 * Negative control: the same storm with the fence switched off in the workers must show violations.
 */
import type pg from 'pg';
import { createTestDatabase } from '../support/db.js';
import { check } from './support/checker.js';
import { connect, LEASE, pause, prepareTables, type Received, sleep, Worker } from './support/harness.js';
import type { LoopPlan, WorkerConfig } from './support/protocol.js';
import { recordScenario } from './support/report.js';

const KEYS = ['storm:0', 'storm:1', 'storm:2'];

/** Every grant of a lease row, numbered in the fenced writes' sequence while the row is locked. */
const GRANTS = [
  `CREATE TABLE fault_grants (target text NOT NULL, fencing_token bigint NOT NULL, grant_seq bigint NOT NULL)`,
  `CREATE FUNCTION fault_record_grant() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     IF NEW.lease_token IS NOT NULL AND (TG_OP = 'INSERT' OR OLD.fencing_token IS DISTINCT FROM NEW.fencing_token) THEN
       INSERT INTO fault_grants VALUES (NEW.target_id, NEW.fencing_token, nextval('fault_commit_seq'));
     END IF;
     RETURN NULL;
   END $$`,
  `CREATE TRIGGER fault_grants AFTER INSERT OR UPDATE ON job_lease FOR EACH ROW EXECUTE FUNCTION fault_record_grant()`,
];

const plan: LoopPlan = {
  loops: 4,
  keys: KEYS,
  iterations: 10_000,
  durationMs: 8_000,
  workMs: 30,
  writesPerLease: 2,
  waitTimeoutMs: 3_000,
  preempt: { share: 0.34, priorities: [3, 6], graceMs: 300 },
  joinShare: 0.33,
  // Some holders ignore their signal past the grace: those are taken over (forced), and their late writes refused.
  stubborn: { share: 0.3, ms: 600 },
};

interface StormFigures {
  ops: number;
  refused: number;
  preemptions: { yielded: number; forced: number };
  joins: number;
  kills: number;
  pauses: number;
  violations: string[];
  liveLeft: number;
  wallMs: number;
}

let db: Awaited<ReturnType<typeof createTestDatabase>>;
let admin: pg.Client;

afterEach(async () => {
  await admin?.end();
  await db?.drop();
});

async function storm(name: string, unfenced: boolean): Promise<StormFigures> {
  db = await createTestDatabase('faults');
  await prepareTables(db.url, KEYS);
  admin = await connect(db.url);
  for (const statement of GRANTS) await admin.query(statement);
  const log: Received[] = [];
  const started = performance.now();
  let next = 0;
  const config = (durationMs: number): WorkerConfig => ({
    name: `${name}-${next++}`,
    url: db.url,
    lease: LEASE,
    poolSize: plan.loops + 2,
    unfenced,
    loop: { ...plan, durationMs },
    maxLifetimeMs: plan.durationMs + 60_000,
  });
  const alive = new Set(await Promise.all(Array.from({ length: 4 }, () => Worker.start(config(plan.durationMs), log))));
  const all = [...alive];
  // The workers' loops run from about now (starting a process takes seconds on a loaded machine).
  const looping = performance.now();
  let kills = 0;
  let pauses = 0;
  try {
    // A fault every 800 ms, never waited for in line: a pause runs its course, a killed process is replaced while the
    // next faults go on (its replacement loops for what is left of the run).
    const faults: Promise<unknown>[] = [];
    const struck = new Set<Worker>();
    for (let round = 0; performance.now() - looping < plan.durationMs - 3_000; round++) {
      await sleep(800);
      const candidates = [...alive].filter((worker) => !struck.has(worker));
      if (candidates.length === 0) continue;
      const victim = candidates[round % candidates.length];
      struck.add(victim);
      if (round % 2 === 0) {
        pauses++;
        faults.push(pause(victim, 2 * LEASE.timing!.leaseTimeoutMs!).finally(() => struck.delete(victim)));
      } else {
        kills++;
        victim.signal('SIGKILL');
        alive.delete(victim);
        const left = plan.durationMs - (performance.now() - looping);
        const replaced = victim.exited
          .then(() => Worker.start(config(Math.max(1_000, left)), log))
          .then((fresh) => {
            alive.add(fresh);
            all.push(fresh);
          });
        faults.push(replaced);
      }
    }
    await Promise.all(faults);
    await Promise.all([...alive].map((w) => w.waitFor((m) => m.t === 'done', 'done', plan.durationMs + 30_000)));
  } finally {
    await Promise.all(all.map((w) => w.end()));
  }
  const wallMs = performance.now() - started;
  const result = await check(admin, log);
  const violations = [...result.violations];
  const late = await admin.query<{ target: string; token: string; worker: string; newer: string }>(
    `SELECT h.target, h.fencing_token::text AS token, h.worker, min(g.fencing_token)::text AS newer
     FROM fault_history h JOIN fault_grants g
       ON g.target = h.target AND g.fencing_token > h.fencing_token AND g.grant_seq < h.commit_seq
     GROUP BY h.op_id, h.target, h.fencing_token, h.worker`,
  );
  for (const row of late.rows) {
    violations.push(`${row.target}: ${row.worker} committed under token ${row.token} after the grant of ${row.newer}`);
  }
  const committed = await admin.query<{ op_id: string; fencing_token: string }>(
    `SELECT op_id::text, fencing_token::text FROM fault_history`,
  );
  const tokenOf = new Map(committed.rows.map((row) => [row.op_id, row.fencing_token]));
  let joins = 0;
  const preemptions = { yielded: 0, forced: 0 };
  for (const { worker, msg } of log) {
    if (msg.t === 'preempted') preemptions[msg.forced ? 'forced' : 'yielded']++;
    if (msg.t !== 'joined') continue;
    joins++;
    if (tokenOf.get(msg.opId) !== msg.fencingToken) {
      violations.push(`${worker} joined ${msg.key} and got op ${msg.opId} (token ${msg.fencingToken}): not committed`);
    }
  }
  // Killed processes' rows expire one lease timeout after their last renewal.
  await sleep(LEASE.timing!.leaseTimeoutMs! + 500);
  const left = await admin.query<{ n: number }>(
    `SELECT (SELECT count(*) FROM job_lease l
       WHERE l.lease_token IS NOT NULL AND l.updated_at + l.lease_timeout_ms * interval '1 millisecond' > clock_timestamp())
     + (SELECT count(*) FROM job_lease_waiter w
       WHERE w.heartbeat_at + w.timeout_ms * interval '1 millisecond' > clock_timestamp()) AS n`,
  );
  const figures: StormFigures = {
    ops: result.writes,
    refused: result.refused,
    preemptions,
    joins,
    kills,
    pauses,
    violations,
    liveLeft: Number(left.rows[0].n),
    wallMs,
  };
  recordScenario({
    scenario: name,
    faults: `preemption storm + joins; ${pauses} × SIGSTOP ${2 * LEASE.timing!.leaseTimeoutMs!} ms, ${kills} × SIGKILL${unfenced ? '; fence switched off' : ''}`,
    writes: `${result.writes} / ${result.refused}`,
    violations: violations.length,
    wallMs,
  });
  console.log(
    `[faults] ${name}: ${figures.ops} committed writes, ${figures.refused} refused, preemptions ` +
      `${preemptions.yielded} yielded + ${preemptions.forced} forced, ${joins} joins, ${kills} kills, ${pauses} pauses, ` +
      `${violations.length} violations, ${figures.liveLeft} left live`,
  );
  if (violations.length) console.log(`[faults] ${name} violations (first 5):\n${violations.slice(0, 5).join('\n')}`);
  return figures;
}

test('preemption storms and joins under kills and pauses: fenced exclusion holds, joins saw commits, nothing held', async () => {
  const figures = await storm('preemption storm', false);
  expect(figures.violations).toEqual([]);
  expect(figures.preemptions.yielded).toBeGreaterThan(0);
  expect(figures.preemptions.forced).toBeGreaterThan(0);
  expect(figures.joins).toBeGreaterThan(0);
  expect(figures.kills + figures.pauses).toBeGreaterThan(2);
  expect(figures.ops).toBeGreaterThan(100);
  expect(figures.liveLeft).toBe(0);
});

test('negative control: the same storm with the fence switched off, and the checker finds violations', async () => {
  const figures = await storm('preemption storm, unfenced', true);
  expect(figures.violations.length).toBeGreaterThan(0);
});
