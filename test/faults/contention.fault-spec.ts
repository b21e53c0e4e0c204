/**
 * Contention: 4 processes × 8 loops on 1 key and on 100 keys, every lease ending in fenced writes; the checker must
 * find nothing. Negative control: the same workers with holders paused (SIGSTOP right after they acquire, for
 * 2 × the lease timeout) — fenced, the checker still finds nothing; with the fence switched off in the worker, it
 * must find violations, which proves it can.
 */
import type pg from 'pg';
import { createTestDatabase } from '../support/db.js';
import { check, type CheckResult } from './support/checker.js';
import { connect, LEASE, pause, prepareTables, runFleet, sleep, type Worker } from './support/harness.js';
import type { LoopPlan } from './support/protocol.js';
import { slotTargets } from './support/history.js';
import { recordScenario } from './support/report.js';

const keys = (n: number) => Array.from({ length: n }, (_, i) => `contention:${i}`);

let db: Awaited<ReturnType<typeof createTestDatabase>>;
let admin: pg.Client;

async function scenario(
  name: string,
  plan: LoopPlan,
  options: { unfenced?: boolean; pauses?: number } = {},
): Promise<CheckResult & { pauses: number }> {
  db = await createTestDatabase('faults');
  await prepareTables(db.url, plan.limit ? slotTargets(plan.keys, plan.limit) : plan.keys);
  admin = await connect(db.url);
  let pauses = 0;
  const run = await runFleet(
    { url: db.url, processes: 4, plan, lease: LEASE, unfenced: options.unfenced, prefix: name },
    async (workers) => {
      for (let i = 0; i < (options.pauses ?? 0); i++) {
        // Pause a process right after one of its loops acquired: it holds a lease and has not written yet.
        const victim: Worker = workers[i % workers.length];
        await victim.waitFor((m) => m.t === 'acquired', 'an acquisition', 20_000, performance.now());
        await pause(victim, 2 * LEASE.timing!.leaseTimeoutMs!);
        pauses++;
        await sleep(300);
      }
    },
  );
  const result = await check(admin, run.log, new Map(plan.keys.map((key) => [key, plan.limit ?? 1] as const)));
  recordScenario({
    scenario: name,
    faults: pauses
      ? `${pauses} × SIGSTOP ${2 * LEASE.timing!.leaseTimeoutMs!} ms after an acquisition${options.unfenced ? '; fence switched off' : ''}`
      : 'none (contention only)',
    writes: `${result.writes} / ${result.refused}`,
    violations: result.violations.length,
    wallMs: run.wallMs,
  });
  if (result.violations.length)
    console.log(`[faults] ${name} violations (first 5):\n${result.violations.slice(0, 5).join('\n')}`);
  return { ...result, pauses };
}

afterEach(async () => {
  await admin?.end();
  await db?.drop();
});

// 32 loops × 10 leases × 4 writes = 1,280 fenced writes. On one key the loops wait in line (every lease is a
// handoff: 320 of them, each judged by the checker as the 640 of a longer run would be); on 100 keys they try once
// and move on when busy. The duration is only a cap for a very loaded machine.
const contention = (keyCount: number): LoopPlan => ({
  loops: 8,
  keys: keys(keyCount),
  iterations: 10,
  durationMs: 90_000,
  workMs: 2,
  writesPerLease: 4,
  waitTimeoutMs: keyCount === 1 ? 20_000 : 0,
});

test('contention on 1 key: 4 processes × 8 loops, ≥ 1,000 fenced writes, no violation', async () => {
  const result = await scenario('contention 1 key', contention(1));
  expect(result.violations).toEqual([]);
  expect(result.writes).toBeGreaterThanOrEqual(1_000);
  expect(result.acked).toBe(result.writes);
});

test('contention on 100 keys: 4 processes × 8 loops, ≥ 1,000 fenced writes, no violation', async () => {
  const result = await scenario('contention 100 keys', contention(100));
  expect(result.violations).toEqual([]);
  expect(result.writes).toBeGreaterThanOrEqual(1_000);
  expect(result.acked).toBe(result.writes);
});

const paused: LoopPlan = {
  loops: 8,
  keys: keys(4),
  iterations: 10_000,
  durationMs: 20_000,
  workMs: 40,
  writesPerLease: 2,
  waitTimeoutMs: 0,
};

test('holders paused past their lease timeout, fenced: stale writes are refused, no violation', async () => {
  const result = await scenario('pauses, fenced', paused, { pauses: 4 });
  expect(result.violations).toEqual([]);
  // The pauses really cost leases, and the stale writers really tried: the fence refused them.
  expect(result.lostEvents).toBeGreaterThan(0);
  expect(result.refused).toBeGreaterThan(0);
});

test('negative control: the same pauses with the fence switched off, and the checker finds violations', async () => {
  const result = await scenario('negative control (unfenced)', paused, { unfenced: true, pauses: 4 });
  expect(result.violations.length).toBeGreaterThan(0);
});

// Semaphores (issue 30): 3 slots per key, holders paused past their lease timeout (their slots taken over): per
// slot the fence refuses the stale writes, and per key never more than 3 holders overlap.
const semaphore: LoopPlan = { ...paused, keys: keys(2), limit: 3, loops: 4 };

test('semaphore (limit 3): holders paused past their lease timeout, fenced: no violation per slot or per key', async () => {
  const result = await scenario('semaphore pauses, fenced', semaphore, { pauses: 4 });
  expect(result.violations).toEqual([]);
  expect(result.lostEvents).toBeGreaterThan(0);
  expect(result.refused).toBeGreaterThan(0);
});

test('semaphore negative control: the same pauses unfenced, and the per-slot checker finds violations', async () => {
  const result = await scenario('semaphore negative control (unfenced)', semaphore, { unfenced: true, pauses: 4 });
  expect(result.violations.length).toBeGreaterThan(0);
});
