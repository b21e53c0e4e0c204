/**
 * One process of the prototype's overlap check (check.ts): `clients` loops over a shared set of keys, each
 * acquisition going through this process's group commit, each grant followed by a fenced write (lock the lease row,
 * compare the token, record the fencing token) and a release. Prints one JSON line of counters when done.
 *
 *   node --import tsx bench/prototype/check-worker.ts <databaseUrl> <name> <clients> <keys> <durationMs>
 */
import pg from 'pg';
import { PrototypeLeases, type PrototypeLease } from './prototype-leases.js';

const [url, name, clients, keys, durationMs] = process.argv.slice(2);
if (!url || !name) throw new Error('usage: check-worker.ts <databaseUrl> <name> <clients> <keys> <durationMs>');

const pool = new pg.Pool({ connectionString: url, max: 8 });
const leases = new PrototypeLeases(pool, {
  names: { schema: 'public', tableName: 'job_lease', waiterTableName: 'job_lease_waiter' },
  owner: name,
  maxBatch: 16,
});

const counters = { granted: 0, refused: 0, fenced: 0, fenceRefused: 0, released: 0, errors: [] as string[] };

/** A fenced write: the history row commits only while the lease row carries our token (row locked until COMMIT). */
async function fencedWrite(lease: PrototypeLease): Promise<boolean> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query<{ lease_token: string | null }>(
      'SELECT lease_token::text FROM job_lease WHERE target_id = $1 FOR UPDATE',
      [lease.targetKey],
    );
    if (rows[0]?.lease_token !== lease.token) {
      await client.query('ROLLBACK');
      return false;
    }
    await client.query(
      `INSERT INTO proto_history (target_id, fencing_token, owner, seq) VALUES ($1, $2, $3, nextval('proto_history_seq'))`,
      [lease.targetKey, lease.fencingToken.toString(), name],
    );
    await client.query('COMMIT');
    return true;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

const deadline = performance.now() + Number(durationMs);
await Promise.all(
  Array.from({ length: Number(clients) }, async (_, client) => {
    let i = client;
    while (performance.now() < deadline) {
      const key = `ov:${(i = (i * 7 + 3) % Number(keys))}`;
      try {
        const lease = await leases.tryAcquire(key);
        if (!lease) {
          counters.refused++;
          continue;
        }
        counters.granted++;
        if (await fencedWrite(lease)) counters.fenced++;
        else counters.fenceRefused++;
        if (await leases.release(lease)) counters.released++;
      } catch (error) {
        counters.errors.push(`${(error as { code?: string }).code ?? ''} ${String(error)}`);
      }
    }
  }),
);
const stats = leases.stats();
await leases.close();
await pool.end();
console.log(JSON.stringify({ name, ...counters, stats }));
