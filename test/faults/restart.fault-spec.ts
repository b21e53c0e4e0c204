/**
 * PostgreSQL restart while leases are held: a dedicated embedded server (never the shared one other files use) is
 * stopped for longer than the lease timeout and started again while 3 processes × 4 loops work on 24 keys. Holders
 * must abort (their leases cannot be renewed) or carry on after the restart; every process must commit again; the
 * checker must find nothing. Skipped with DATABASE_URL: an external server cannot be restarted from here.
 */
import { createDatabase, startPostgres } from '@app/pg-harness';
import { LeaseLostError, LeaseService, leaseEntities } from 'nest-pg-lease';
import { DataSource } from 'typeorm';
import { check } from './support/checker.js';
import { connect, LEASE, ms, prepareTables, runFleet, sleep } from './support/harness.js';
import type { LoopPlan } from './support/protocol.js';
import { recordScenario } from './support/report.js';

const KEYS = Array.from({ length: 24 }, (_, i) => `restart:${i}`);
// Work long enough that the outage finds holders mid-work, whose leases then run out.
const PLAN: LoopPlan = {
  loops: 4,
  keys: KEYS,
  iterations: 100_000,
  durationMs: 18_000,
  workMs: 2_000,
  writesPerLease: 2,
  waitTimeoutMs: 0,
};
const DOWN_MS = 2 * LEASE.timing!.leaseTimeoutMs!;
const external = Boolean(process.env.DATABASE_URL);

if (external) {
  console.log(
    '[faults] PostgreSQL restart scenario skipped: DATABASE_URL names an external server, which this suite cannot restart',
  );
}

(external ? test.skip : test)(
  'PostgreSQL stopped and restarted while leases are held: holders abort or recover, no violation',
  async () => {
    const server = await startPostgres();
    try {
      const url = await createDatabase(server.url, 'faults');
      await prepareTables(url, KEYS);
      // One lease certainly held across the whole outage (the fleet's own leases may all end in the outage's first
      // second: a holder whose work ends then fails its write and releases, and is never 'lost').
      const watcherDb = new DataSource({ type: 'postgres', url, entities: [...leaseEntities], extra: { max: 2 } });
      await watcherDb.initialize();
      const watcher = new LeaseService(watcherDb, LEASE);
      await watcher.init();
      const watched = (await watcher.tryAcquire('restart:watched'))!;
      let watchedAbortedAt = 0;
      watched.signal.addEventListener('abort', () => (watchedAbortedAt = performance.now()), { once: true });
      let restartedAt = 0;
      let downMs = 0;
      const run = await runFleet(
        { url, processes: 3, plan: PLAN, lease: LEASE, prefix: 'restart' },
        async (workers) => {
          await Promise.all(
            workers.map((w) => w.waitFor((m) => m.t === 'write' && m.outcome === 'ack', 'a first commit')),
          );
          const stoppedAt = performance.now();
          await server.stop();
          await sleep(DOWN_MS);
          await server.start();
          restartedAt = performance.now();
          downMs = restartedAt - stoppedAt;
        },
      );

      await watcher.close();
      await watcherDb.destroy().catch(() => undefined);
      const admin = await connect(url);
      try {
        const result = await check(admin, run.log);
        recordScenario({
          scenario: 'PostgreSQL restart',
          faults: `server down ${ms(downMs)} ms (fast shutdown, then start) with leases held; ${result.lostEvents} fleet leases lost (and the watched one)`,
          writes: `${result.writes} / ${result.refused}; ${result.unknown.committed + result.unknown.notCommitted} cut-off commits resolved (${result.unknown.committed} committed)`,
          violations: result.violations.length,
          wallMs: run.wallMs,
        });
        expect(result.violations).toEqual([]);
        // A lease held across the outage could not be renewed: its holder was told while the server was down.
        expect(watched.signal.reason).toBeInstanceOf(LeaseLostError);
        expect(watchedAbortedAt).toBeGreaterThan(0);
        expect(watchedAbortedAt).toBeLessThan(restartedAt);
        for (const worker of run.workers) {
          const after = worker
            .messages()
            .filter((r) => r.at > restartedAt && r.msg.t === 'write' && r.msg.outcome === 'ack');
          expect({ worker: worker.name, recovered: after.length > 0 }).toEqual({
            worker: worker.name,
            recovered: true,
          });
        }
      } finally {
        await admin.end();
      }
    } finally {
      await server.destroy();
    }
  },
);
