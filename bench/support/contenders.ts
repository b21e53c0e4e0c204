/**
 * The implementations under test, each opened on connections of its own: nest-pg-lease (with its defaults, with
 * asyncReleaseCommits, and prototypes of other table settings), PostgreSQL advisory locks, the seed's plain upsert,
 * and @verrou/core with its knex (PostgreSQL) store.
 */
import type { LeaseModuleOptions } from 'nest-pg-lease';
import { Verrou } from '@verrou/core';
import { knexStore } from '@verrou/core/drivers/knex';
import knex, { type Knex } from 'knex';
import pg from 'pg';
import { openService, type OpenedService } from '../../test/support/lease-service.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

/** Long enough that no heartbeat fires inside a short phase; scenarios that measure heartbeats set their own. */
/**
 * Long timings (nothing expires during a run) and no shutdown drain: some scenarios close a service with leases still
 * held on purpose (the held key of the failed-acquire rounds, the 10,000 heartbeat leases), and the default 25 s
 * drain would add its full grace to every such close.
 */
export const BENCH_LEASE_OPTIONS: LeaseModuleOptions = {
  timing: { heartbeatIntervalMs: 10_000, leaseTimeoutMs: 60_000, shutdownGraceMs: 0 },
};

/**
 * - `shipped`: the library with its defaults.
 * - `async-release`: the library with `connections: { asyncReleaseCommits: true }` (releases commit without waiting for
 *   the WAL flush; acquisitions and fenced writes stay durable).
 * - `unlogged`: prototype; the lease table is UNLOGGED (no WAL, emptied by crash recovery), the fencing sequence
 *   stays logged.
 * - `fillfactor-80`: the lease table with the previous fillfactor 80 instead of the shipped 50, for comparison.
 * - `unbatched`: `connections: { maxBatchSize: 1 }`, group commit off: every acquisition and release its own statement and commit.
 */
export type LeaseVariant = 'shipped' | 'async-release' | 'unlogged' | 'fillfactor-80' | 'unbatched';

export const UNLOGGED_TABLES = { tableName: 'bench_unlogged_lease', waiterTableName: 'bench_unlogged_lease_waiter' };
export const FILLFACTOR_80_TABLES = { tableName: 'bench_ff80_lease', waiterTableName: 'bench_ff80_lease_waiter' };

export type OpenLeases = OpenedService;

/** The library on a DataSource of its own (the one opener tests and benchmarks share), in one of the variants. */
export function openLeases(
  url: string,
  poolSize: number,
  options: LeaseModuleOptions = {},
  variant: LeaseVariant = 'shipped',
): Promise<OpenLeases> {
  const variantOptions: Record<LeaseVariant, LeaseModuleOptions> = {
    shipped: {},
    'async-release': { connections: { asyncReleaseCommits: true } },
    unlogged: { tables: UNLOGGED_TABLES },
    'fillfactor-80': { tables: FILLFACTOR_80_TABLES },
    unbatched: { connections: { maxBatchSize: 1 } },
  };
  return openService(url, mergeLeaseOptions(BENCH_LEASE_OPTIONS, variantOptions[variant], options), {
    poolSize,
    entities: [],
  });
}

/** A pg pool for the raw-SQL baselines. */
export function openPool(url: string, max: number): pg.Pool {
  return new pg.Pool({ connectionString: url, max });
}

/** Session-level advisory locks need the same connection for lock and unlock: each client keeps one. */
export async function openAdvisory(
  url: string,
  clients: number,
): Promise<{ sessions: pg.PoolClient[]; close(): Promise<void> }> {
  const pool = openPool(url, clients);
  const sessions = await Promise.all(Array.from({ length: clients }, () => pool.connect()));
  return {
    sessions,
    close: async () => {
      for (const session of sessions) session.release();
      await pool.end();
    },
  };
}

export const advisory = {
  tryLock: (session: pg.PoolClient, key: number) =>
    session.query<{ ok: boolean }>({
      name: 'adv_try',
      text: 'SELECT pg_try_advisory_lock($1::bigint) AS ok',
      values: [key],
    }),
  lock: (session: pg.PoolClient, key: number) =>
    session.query({ name: 'adv_lock', text: 'SELECT pg_advisory_lock($1::bigint)', values: [key] }),
  unlock: (session: pg.PoolClient, key: number) =>
    session.query({ name: 'adv_unlock', text: 'SELECT pg_advisory_unlock($1::bigint)', values: [key] }),
};

/** The seed document's statements, verbatim in shape: upsert that takes over an expired row, token-guarded delete. */
export const seed = {
  table: `CREATE TABLE IF NOT EXISTS seed_lease (target_id text PRIMARY KEY, lease_token uuid NOT NULL, updated_at timestamptz NOT NULL)`,
  acquire: (pool: pg.Pool, key: string, token: string) =>
    pool.query<{ lease_token: string }>({
      name: 'seed_acquire',
      text: `INSERT INTO seed_lease (target_id, lease_token, updated_at) VALUES ($1, $2, now())
        ON CONFLICT (target_id) DO UPDATE SET lease_token = EXCLUDED.lease_token, updated_at = now()
        WHERE seed_lease.updated_at < now() - interval '120 seconds'
        RETURNING lease_token`,
      values: [key, token],
    }),
  release: (pool: pg.Pool, key: string, token: string) =>
    pool.query({
      name: 'seed_release',
      text: 'DELETE FROM seed_lease WHERE target_id = $1 AND lease_token = $2',
      values: [key, token],
    }),
};

export interface OpenVerrou {
  verrou: Verrou<{ pg: ReturnType<typeof verrouStores>['pg'] }>;
  close(): Promise<void>;
}

function verrouStores(connection: Knex) {
  return { pg: { driver: knexStore({ connection, tableName: 'verrou' }) } };
}

/** @verrou/core with its database store over knex (`pg` driver), on a pool of `poolSize`. */
export function openVerrou(url: string, poolSize: number): OpenVerrou {
  const connection = knex({ client: 'pg', connection: url, pool: { min: 0, max: poolSize } });
  const verrou = new Verrou({ default: 'pg', stores: verrouStores(connection) });
  return { verrou, close: () => connection.destroy() };
}

/** Runs `op` for 0 … total−1 with at most `concurrency` in flight. */
export async function forEachConcurrently(
  total: number,
  concurrency: number,
  op: (i: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, total) }, async () => {
      while (next < total) await op(next++);
    }),
  );
}
