/**
 * Backend kills: while 3 processes × 4 loops contend for 6 keys, the harness ends their PostgreSQL sessions with
 * pg_terminate_backend in every phase of a lease's life — deterministically: each kill is aimed. For a phase, a
 * racepoint is created for a moment (a trigger that sleeps inside PostgreSQL for one worker's statement of that
 * phase only: an acquisition, a fenced write, a release, a release riding on the last fenced write, a renewal), the harness waits until that worker's backend
 * sleeps in it, and kills that backend; the LISTEN connection, idle by nature, is killed directly. Every phase is hit
 * the same number of times whatever the load. Then a random storm of kills (the old scenario) adds what no schedule
 * aims at, and asserts safety only. Then the kills stop and every process must commit again (the pools recovered).
 * Writes whose COMMIT was cut off are resolved from the history; the checker must find nothing.
 */
import type pg from 'pg';
import { createTestDatabase } from '../support/db.js';
import { check } from './support/checker.js';
import { connect, LEASE, prepareTables, runFleet, sleep, terminateBackends, type Worker } from './support/harness.js';
import type { LoopPlan } from './support/protocol.js';
import { recordScenario } from './support/report.js';

const KEYS = Array.from({ length: 6 }, (_, i) => `kill:${i}`);
const PLAN: LoopPlan = {
  loops: 4,
  keys: KEYS,
  iterations: 100_000,
  // Far longer than the kills take: the workers loop until told to stop (after the kills and a recovery period).
  durationMs: 180_000,
  workMs: 20,
  writesPerLease: 2,
  waitTimeoutMs: 3_000,
  // Every other lease's last write releases it in its own transaction: the 'release with the last save' phase.
  releaseWithLastSave: true,
};
/**
 * Aimed kills per phase: a second round kills each phase again once the pools recovered from the first (the phases
 * go to the same workers in every round: 6 phases over 3 workers).
 */
const ROUNDS = 2;
/** The random storm after the aimed kills. */
const STORM_MS = 5_000;
/** After the kills, before the loops are told to stop: every process must commit again. */
const RECOVERY_MS = 3_000;

interface Phase {
  /** The connection of the worker the phase runs on (`<worker>` is replaced): its application_name. */
  readonly session: string;
  /** The racepoint: a trigger that sleeps for this worker's statement of the phase (none: kill the session as is). */
  readonly racepoint?: { table: string; events: string; when: string };
}

/** Every phase of a lease's life, and how to stall a worker's statement in it. */
const PHASES: Record<string, Phase> = {
  acquire: {
    session: '<worker>:statements',
    racepoint: {
      table: 'job_lease',
      events: 'INSERT OR UPDATE',
      when: `NEW.lease_token IS NOT NULL AND (TG_OP = 'INSERT' OR OLD.lease_token IS DISTINCT FROM NEW.lease_token)`,
    },
  },
  'fenced write': { session: '<worker>', racepoint: { table: 'fault_history', events: 'INSERT', when: 'true' } },
  release: {
    session: '<worker>:statements',
    racepoint: {
      table: 'job_lease',
      events: 'UPDATE',
      when: 'NEW.lease_token IS NULL AND OLD.lease_token IS NOT NULL',
    },
  },
  // The release riding on the last fenced write: the release statement inside the fenced transaction, on the
  // worker's DataSource connection. Killed there, neither the write nor the release may commit.
  'release with the last save': {
    session: '<worker>',
    racepoint: {
      table: 'job_lease',
      events: 'UPDATE',
      when: 'NEW.lease_token IS NULL AND OLD.lease_token IS NOT NULL',
    },
  },
  heartbeat: {
    session: '<worker>:heartbeat',
    racepoint: { table: 'job_lease', events: 'UPDATE', when: 'NEW.lease_token = OLD.lease_token' },
  },
  listen: { session: '<worker>:listen' },
};

/** Kills the backend of `session` once it is in the phase (sleeping in its racepoint, or simply connected). */
async function aimedKill(admin: pg.Client, phase: Phase, session: string, round: number): Promise<boolean> {
  const name = `racepoint_${round}`;
  const { racepoint } = phase;
  if (racepoint) {
    await admin.query(`CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF current_setting('application_name') = '${session}' AND (${racepoint.when}) THEN PERFORM pg_sleep(30); END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER ${name} BEFORE ${racepoint.events} ON ${racepoint.table}
        FOR EACH ROW EXECUTE FUNCTION ${name}();`);
  }
  try {
    const until = performance.now() + 10_000;
    while (performance.now() < until) {
      const where = racepoint ? `wait_event = 'PgSleep'` : 'true';
      const { rows } = await admin.query<{ n: number }>(
        `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
         WHERE application_name = $1 AND pid <> pg_backend_pid() AND ${where}`,
        [session],
      );
      if (rows[0].n > 0) return true;
      await sleep(10);
    }
    return false;
  } finally {
    if (racepoint) await admin.query(`DROP TRIGGER ${name} ON ${racepoint.table}; DROP FUNCTION ${name}()`);
  }
}

/** The random storm's targets (pg_stat_activity conditions). */
const STORM: string[] = [
  `query LIKE 'WITH held AS%' OR query LIKE 'WITH history AS%'`,
  `state LIKE 'idle in transaction%' OR query LIKE '%FOR UPDATE%' OR query LIKE '%fault_%'`,
  `query LIKE '%SET lease_token = NULL%'`,
  `application_name LIKE '%:heartbeat'`,
  `query LIKE 'LISTEN%'`,
];

test('pg_terminate_backend aimed at every phase (acquire, fenced write, release, heartbeat, LISTEN), then a random storm: pools recover, outcomes resolved, no violation', async () => {
  const db = await createTestDatabase('faults');
  await prepareTables(db.url, KEYS);
  const admin = await connect(db.url);
  const kills: Record<string, number> = Object.fromEntries(Object.keys(PHASES).map((phase) => [phase, 0]));
  let stormKills = 0;
  let killsEndedAt = 0;
  try {
    const run = await runFleet(
      { url: db.url, processes: 3, plan: PLAN, lease: LEASE, prefix: 'kill' },
      async (workers: Worker[]) => {
        let step = 0;
        for (let round = 0; round < ROUNDS; round++) {
          for (const [name, phase] of Object.entries(PHASES)) {
            const worker = workers[step++ % workers.length];
            if (await aimedKill(admin, phase, phase.session.replace('<worker>', worker.name), step)) kills[name]++;
          }
        }
        const stormEnds = performance.now() + STORM_MS;
        for (let round = 0; performance.now() < stormEnds; round++) {
          stormKills += await terminateBackends(admin, 'kill-', STORM[round % STORM.length]);
          await sleep(60 + Math.random() * 120);
        }
        killsEndedAt = performance.now();
        // Time to recover, then the loops stop.
        await sleep(RECOVERY_MS);
        for (const worker of workers) worker.post({ t: 'stop' });
      },
    );

    const result = await check(admin, run.log);
    const aimed = Object.values(kills).reduce((a, b) => a + b, 0);
    recordScenario({
      scenario: 'backend kills',
      faults: `${aimed} aimed kills (${Object.entries(kills)
        .map(([p, n]) => `${p} ${n}`)
        .join(', ')}), then ${stormKills} in a random storm`,
      writes: `${result.writes} / ${result.refused}; ${result.unknown.committed + result.unknown.notCommitted} cut-off commits resolved (${result.unknown.committed} committed)`,
      violations: result.violations.length,
      wallMs: run.wallMs,
    });
    expect(result.violations).toEqual([]);
    // Aimed, not hoped for: every phase was hit in every round.
    expect(kills).toEqual(Object.fromEntries(Object.keys(PHASES).map((phase) => [phase, ROUNDS])));
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
