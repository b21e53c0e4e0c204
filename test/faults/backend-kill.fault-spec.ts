/**
 * Backend kills: while 3 processes × 4 loops contend for 6 keys, the harness repeatedly ends their PostgreSQL
 * sessions with pg_terminate_backend, aiming in turn at connections in the middle of a fenced transaction, whose last
 * statement was an acquire or a release, the heartbeat connection and the LISTEN connection. Then
 * the kills stop and every process must commit again (the pools recovered). Writes whose COMMIT was cut off are
 * resolved from the history; the checker must find nothing.
 */
import { createTestDatabase } from '../support/db.js';
import { check } from './support/checker.js';
import { connect, LEASE, prepareTables, runFleet, sleep, terminateBackends } from './support/harness.js';
import type { LoopPlan } from './support/protocol.js';
import { recordScenario } from './support/report.js';

const KEYS = Array.from({ length: 6 }, (_, i) => `kill:${i}`);
const PLAN: LoopPlan = {
  loops: 4,
  keys: KEYS,
  iterations: 100_000,
  durationMs: 17_000,
  workMs: 20,
  writesPerLease: 2,
  waitTimeoutMs: 3_000,
};
/** Kills go on for at least this long, and until every phase was hit, but never longer than the cap. */
const KILLING_MS = 10_000;
const KILLING_CAP_MS = 13_000;

/** Which sessions each kill aims at (pg_stat_activity conditions). */
const PHASES: Record<string, string> = {
  // The acquisition statements by their opening (the text pg_stat_activity keeps is cut at 1 kB): the single one
  // (also the one that queues a caller about to wait) and the batch.
  acquire: `query LIKE 'WITH held AS%' OR query LIKE 'WITH history AS%'`,
  'fenced write': `state LIKE 'idle in transaction%' OR query LIKE '%FOR UPDATE%' OR query LIKE '%fault_%'`,
  release: `query LIKE '%SET lease_token = NULL%'`,
  heartbeat: `application_name LIKE '%:heartbeat'`,
  listen: `query LIKE 'LISTEN%'`,
};

test('pg_terminate_backend during acquire, heartbeat, fenced write and release: pools recover, outcomes resolved, no violation', async () => {
  const db = await createTestDatabase('faults');
  await prepareTables(db.url, KEYS);
  const admin = await connect(db.url);
  const kills: Record<string, number> = Object.fromEntries(Object.keys(PHASES).map((phase) => [phase, 0]));
  let killsEndedAt = 0;
  try {
    const run = await runFleet({ url: db.url, processes: 3, plan: PLAN, lease: LEASE, prefix: 'kill' }, async () => {
      const from = performance.now();
      const hitAll = () => Object.values(kills).every((n) => n > 0);
      for (let round = 0; performance.now() - from < (hitAll() ? KILLING_MS : KILLING_CAP_MS); round++) {
        // Acquires and fenced writes are short and their connections soon reused, so a kill finds one less often
        // than a heartbeat or LISTEN connection: they get a round each out of three.
        const others = Object.keys(PHASES).slice(2);
        const phase =
          round % 3 === 0
            ? 'acquire'
            : round % 3 === 1
              ? 'fenced write'
              : others[Math.floor(round / 3) % others.length];
        kills[phase] += await terminateBackends(admin, 'kill-', PHASES[phase]);
        await sleep(60 + Math.random() * 120);
      }
      killsEndedAt = performance.now();
    });

    const result = await check(admin, run.log);
    const total = Object.values(kills).reduce((a, b) => a + b, 0);
    recordScenario({
      scenario: 'backend kills',
      faults: `${total} sessions killed (${Object.entries(kills)
        .map(([p, n]) => `${p} ${n}`)
        .join(', ')})`,
      writes: `${result.writes} / ${result.refused}; ${result.unknown.committed + result.unknown.notCommitted} cut-off commits resolved (${result.unknown.committed} committed)`,
      violations: result.violations.length,
      wallMs: run.wallMs,
    });
    expect(result.violations).toEqual([]);
    expect(total).toBeGreaterThanOrEqual(30);
    for (const phase of Object.keys(PHASES))
      expect({ phase, killed: kills[phase] > 0 }).toEqual({ phase, killed: true });
    // Every process commits again once the kills stop.
    for (const worker of run.workers) {
      const recovered = worker
        .messages()
        .filter((r) => r.at > killsEndedAt && r.msg.t === 'write' && r.msg.outcome === 'ack');
      expect({ worker: worker.name, recovered: recovered.length > 0 }).toEqual({
        worker: worker.name,
        recovered: true,
      });
    }
  } finally {
    await admin.end();
    await db.drop();
  }
});
