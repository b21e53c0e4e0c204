/**
 * The one PostgreSQL of a benchmark run, and the probes every scenario reads: statements sent by this process,
 * WAL position, and the tuple counters of the benchmark's tables.
 */
import { createDatabase, dropDatabase, startPostgres, type PostgresServer } from '@app/pg-harness';
import type { LeaseModuleOptions } from 'nest-pg-lease';
import pg from 'pg';
import { openService } from '../../test/support/lease-service.js';

/** Clients marked with this symbol (the probes' own) are not counted as round trips. */
const UNCOUNTED = Symbol('bench probe client');
let statementsSent = 0;

/**
 * Counts every statement any `pg` client of this process sends (the library's pools, its heartbeat connection, knex,
 * the raw baselines): one `query()` is one round trip. Installed once, before any client exists.
 */
export function countStatements(): void {
  const proto = pg.Client.prototype as unknown as Record<string | symbol, unknown> & {
    query: (...args: unknown[]) => unknown;
  };
  if (proto[UNCOUNTED]) return;
  const original = proto.query;
  proto.query = function (this: Record<symbol, unknown>, ...args: unknown[]) {
    if (!this[UNCOUNTED]) statementsSent++;
    return original.apply(this, args);
  };
  proto[UNCOUNTED] = false;
}

export function statementsSoFar(): number {
  return statementsSent;
}

export interface TableCounters {
  updates: number;
  hotUpdates: number;
  deadTuples: number;
}

/** Tables that the scenarios write; autovacuum is off on them so that dead-tuple counts are exact. */
export const BENCH_TABLES = [
  'job_lease',
  'job_lease_waiter',
  'bench_unlogged_lease',
  'bench_unlogged_lease_waiter',
  'bench_ff80_lease',
  'bench_ff80_lease_waiter',
  'seed_lease',
  'verrou',
  'bench_counter',
];

export class BenchDatabase {
  private constructor(
    readonly server: PostgresServer,
    readonly url: string,
    readonly serverVersion: string,
    private readonly probe: pg.Client,
  ) {}

  /** `settings`: extra `postgres -c` settings for an embedded server (ignored with DATABASE_URL). */
  static async open(settings?: Record<string, string | number>): Promise<BenchDatabase> {
    const server = await startPostgres(settings ? { settings } : {});
    const url = await createDatabase(server.url, 'bench');
    const probe = new pg.Client({ connectionString: url, application_name: 'bench-probe' });
    (probe as unknown as Record<symbol, boolean>)[UNCOUNTED] = true;
    await probe.connect();
    const { rows } = await probe.query<{ version: string; num: number }>(
      `SELECT version() AS version, current_setting('server_version_num')::int AS num`,
    );
    if (rows[0].num < 150000) throw new Error(`The benchmarks need PostgreSQL ≥ 15, got ${rows[0].version}`);
    return new BenchDatabase(server, url, rows[0].version, probe);
  }

  /** The library's tables (and sequences), created the documented way: a LeaseService with `createSchema`. */
  async createLeaseTables(tables: { tableName?: string; waiterTableName?: string } = {}): Promise<void> {
    const options: LeaseModuleOptions = { tables: { ...tables, createSchema: true } };
    const opened = await openService(this.url, options, { poolSize: 1, entities: [] });
    await opened.close();
  }

  query<R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>> {
    return this.probe.query<R>(text, values);
  }

  /** Current WAL insert position in bytes. */
  async walPosition(): Promise<bigint> {
    const { rows } = await this.probe.query<{ pos: string }>(
      `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::text AS pos`,
    );
    return BigInt(rows[0].pos);
  }

  /** The next transaction id: the difference over a window counts the transactions that wrote (each one commit). */
  async nextTransactionId(): Promise<bigint> {
    const { rows } = await this.probe.query<{ xid: string }>(
      `SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS xid`,
    );
    return BigInt(rows[0].xid);
  }

  /**
   * p50 of one durable single-row INSERT (a commit with its WAL flush) on the probe's own table: the yardstick for
   * everything that commits. On a shared disk it moves during a run, so the run takes it at its start and its end.
   */
  async durableCommitP50(): Promise<number> {
    await this.probe.query('DROP TABLE IF EXISTS bench_commit_probe');
    await this.probe.query('CREATE TABLE bench_commit_probe (id int)');
    const samples: number[] = [];
    for (let i = 0; i < 200; i++) {
      const started = performance.now();
      await this.probe.query('INSERT INTO bench_commit_probe VALUES ($1)', [i]);
      samples.push(performance.now() - started);
    }
    await this.probe.query('DROP TABLE bench_commit_probe');
    samples.sort((a, b) => a - b);
    return samples[samples.length >> 1];
  }

  /** Resets dead tuples and bloat between phases, so every round starts from the same table state. */
  async vacuum(): Promise<void> {
    const { rows } = await this.probe.query<{ name: string }>(
      `SELECT relname AS name FROM pg_stat_user_tables WHERE relname = ANY($1)`,
      [BENCH_TABLES],
    );
    for (const { name } of rows) await this.probe.query(`VACUUM "${name}"`);
  }

  async disableAutovacuum(): Promise<void> {
    const { rows } = await this.probe.query<{ name: string }>(
      `SELECT relname AS name FROM pg_class WHERE relname = ANY($1) AND relkind = 'r'`,
      [BENCH_TABLES],
    );
    for (const { name } of rows) await this.probe.query(`ALTER TABLE "${name}" SET (autovacuum_enabled = false)`);
  }

  /**
   * Sum of the tables' counters. Backends publish their counters when they exit, so the phase closes its
   * connections and this first waits until no other session of the database is left.
   */
  async tableCounters(): Promise<TableCounters> {
    const until = Date.now() + 30_000;
    for (;;) {
      const { rows } = await this.probe.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`,
      );
      if (rows[0].n === 0) break;
      if (Date.now() > until)
        throw new Error(`${rows[0].n} sessions of the benchmark database are still open after the phase closed`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await this.probe.query('SELECT pg_stat_clear_snapshot()');
    const { rows } = await this.probe.query<{ upd: string; hot: string; dead: string }>(
      `SELECT coalesce(sum(n_tup_upd), 0)::text AS upd, coalesce(sum(n_tup_hot_upd), 0)::text AS hot,
              coalesce(sum(n_dead_tup), 0)::text AS dead
       FROM pg_stat_user_tables WHERE relname = ANY($1)`,
      [BENCH_TABLES],
    );
    return { updates: Number(rows[0].upd), hotUpdates: Number(rows[0].hot), deadTuples: Number(rows[0].dead) };
  }

  async close(): Promise<void> {
    await this.probe.end();
    await dropDatabase(this.server.url, this.url).catch(() => undefined);
    await this.server.destroy();
  }
}
