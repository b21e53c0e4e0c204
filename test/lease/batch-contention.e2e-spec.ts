/**
 * Overlapping group-commit batches of several processes on the same keys (issue 14): no deadlock, at most one holder
 * per key at any time and fencing tokens strictly increasing per key — judged from the database's own history (a
 * trigger logs every write of the lease table, in the order the row locks serialized them).
 */
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { resolveLeaseOptions, LeaseStore } from '../../libs/lease/src/internal.js';
import { useTestDatabase } from '../support/db.js';
import { startChild } from '../support/processes.js';

const CHILD = fileURLToPath(new URL('./support/batch-contention-child.ts', import.meta.url));
const PROCESSES = 4;

interface Report {
  counts: { acquired: number; refused: number; released: number; errors: string[] };
  stats: { acquire: { batches: number; items: number; largest: number }; release: { largest: number } };
}

describe('batches of several processes on the same keys', () => {
  const children: ChildProcess[] = [];
  const db = useTestDatabase('batchcontention', 'read committed', async (admin, url) => {
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    await new LeaseStore(pool, pool, resolveLeaseOptions({})).schema.createSchema();
    await pool.end();
    await admin.query(`CREATE SEQUENCE history_seq;
      CREATE TABLE history (seq bigint, target_id text, old_token uuid, new_token uuid, fencing_token bigint);
      CREATE FUNCTION log_lease() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO history VALUES (nextval('history_seq'), NEW.target_id,
          CASE WHEN TG_OP = 'UPDATE' THEN OLD.lease_token END, NEW.lease_token, NEW.fencing_token);
        RETURN NULL;
      END $$;
      CREATE TRIGGER log_lease AFTER INSERT OR UPDATE ON job_lease FOR EACH ROW EXECUTE FUNCTION log_lease();`);
  });
  db.beforeDrop(() => {
    for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  });

  test('no deadlock, one holder per key at a time, tokens strictly increasing per key', async () => {
    const deadlocks = async () =>
      Number(
        (await db.admin.query(`SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`)).rows[0]
          .deadlocks,
      );
    const deadlocksBefore = await deadlocks();
    const keys = Array.from({ length: 6 }, (_, i) => `contended:${i}`);
    const reports: Array<Promise<Report>> = [];
    const ready: Array<Promise<void>> = [];
    for (let p = 0; p < PROCESSES; p++) {
      const child = startChild(CHILD, {
        BATCH_CONTENTION: { url: db.url, keys, workers: 24, durationMs: 4_000, owner: `proc-${p}` },
      });
      children.push(child.process);
      ready.push(child.message('ready').then(() => undefined));
      reports.push(child.message<Report>('done'));
    }
    await Promise.all(ready);
    for (const child of children) child.send('go');
    const done = await Promise.all(reports);

    for (const report of done) {
      expect(report.counts.errors).toEqual([]);
      expect(report.counts.acquired).toBeGreaterThan(0);
      expect(report.counts.released).toBe(report.counts.acquired);
    }
    // The processes did batch (several callers in one statement), on keys the others were batching too.
    expect(Math.max(...done.map((report) => report.stats.acquire.largest))).toBeGreaterThan(1);
    expect(await deadlocks()).toBe(deadlocksBefore);

    const { rows } = await db.admin.query<{
      target_id: string;
      old_token: string | null;
      new_token: string | null;
      fencing_token: string;
    }>(`SELECT target_id, old_token::text, new_token::text, fencing_token::text FROM history ORDER BY seq`);
    const acquired = done.reduce((sum, report) => sum + report.counts.acquired, 0);
    let acquisitions = 0;
    const last = new Map<string, bigint>();
    for (const row of rows) {
      if (row.new_token === null) continue; // a release
      acquisitions++;
      // No expiry happens here (2-minute leases): every acquisition must find the key released, never held.
      expect({ key: row.target_id, heldBy: row.old_token }).toEqual({ key: row.target_id, heldBy: null });
      const token = BigInt(row.fencing_token);
      expect(token > (last.get(row.target_id) ?? -1n)).toBe(true);
      last.set(row.target_id, token);
    }
    expect(acquisitions).toBe(acquired);
    const largest = done.map((report) => report.stats.acquire.largest).join('/');
    const batches = done.reduce((sum, report) => sum + report.stats.acquire.batches, 0);
    console.log(`${PROCESSES} processes: ${acquired} acquisitions in ${batches} acquire batches (largest ${largest})`);
  });
});
