/**
 * One process of the batch contention spec, run with `node --import tsx`: `workers` concurrent loops acquire one of
 * the shared keys through the library's store (group commit on) and release it at once, for `durationMs`; then it
 * reports its counts and batch sizes over IPC and exits. It never outlives the test (exits when the parent goes).
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { ownRow, resolveLeaseOptions, LeaseStore } from '../../../libs/lease/src/internal.js';

interface ChildConfig {
  url: string;
  keys: string[];
  workers: number;
  durationMs: number;
  owner: string;
}

const config = JSON.parse(process.env.BATCH_CONTENTION ?? '{}') as ChildConfig;
process.on('disconnect', () => process.exit(0));
setTimeout(() => process.exit(1), 120_000).unref();

const pool = new pg.Pool({ connectionString: config.url, max: 4, application_name: config.owner });
const store = new LeaseStore(
  pool,
  pool,
  resolveLeaseOptions({ owner: config.owner, timing: { leaseTimeoutMs: 120_000 } }),
);
const counts = { acquired: 0, refused: 0, released: 0, errors: [] as string[] };

// Start together: the parent says go once every process is ready.
process.send?.({ type: 'ready' });
await new Promise<void>((resolve) => process.once('message', () => resolve()));
const until = performance.now() + config.durationMs;
await Promise.all(
  Array.from({ length: config.workers }, async () => {
    while (performance.now() < until) {
      const targetKey = config.keys[Math.floor(Math.random() * config.keys.length)];
      const leaseToken = randomUUID();
      try {
        const outcome = await store.tryAcquire({ targetKey, leaseToken, priority: 0, holdMs: 0 });
        if ('refused' in outcome) {
          counts.refused++;
          continue;
        }
        counts.acquired++;
        if (await store.release(ownRow(targetKey), leaseToken, 10_000)) counts.released++;
      } catch (error) {
        counts.errors.push(String(error));
      }
    }
  }),
);
process.send?.({ type: 'done', counts, stats: store.batchStats });
await pool.end();
process.disconnect?.();
