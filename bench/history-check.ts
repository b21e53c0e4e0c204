/**
 * `npm run bench:history` — what knowing the database's history costs (issue 15): the renewal's history check and
 * the timeline in the fencing token. One PostgreSQL (DATABASE_URL, else an embedded one), one client process.
 *
 * 1. The batched renewal (the library's own statement, `LeaseStore.renew`) of 1 and of 100 leases, without and with
 *    the history check (the probe in the BEGIN round trip, the per-lease timeline comparison), interleaved round by
 *    round (A B, B A, …) on one connection; p50 / p90 / mean of the whole renewal (three round trips).
 * 2. The expressions alone, timed inside the server (a PL/pgSQL loop, no round trips): nextval versus the token
 *    expression, and the history probe with and without the system identifier.
 *
 * Flags: --rounds=n (default 3000).
 */
import 'reflect-metadata';
import { createDatabase, dropDatabase, startPostgres } from '@app/pg-harness';
import { type Lease, LeaseService, leaseEntities } from 'nest-pg-lease';
import pg from 'pg';
import { DataSource } from 'typeorm';
import { resolveLeaseOptions } from '../libs/lease/src/lease.options.js';
import { LeaseStore } from '../libs/lease/src/lease-store.js';

const rounds = Number(process.argv.find((arg) => arg.startsWith('--rounds='))?.split('=')[1] ?? 3_000);

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
function summary(samples: number[]): { p50: number; p90: number; mean: number } {
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    p50: percentile(sorted, 0.5),
    p90: percentile(sorted, 0.9),
    mean: samples.reduce((sum, x) => sum + x, 0) / samples.length,
  };
}
const fmt = (ms: number) => `${ms.toFixed(3)} ms`;

async function main(): Promise<void> {
  const server = process.env.DATABASE_URL ? undefined : await startPostgres();
  const serverUrl = process.env.DATABASE_URL ?? server!.url;
  const url = await createDatabase(serverUrl, 'bench_history');
  const dataSource = new DataSource({ type: 'postgres', url, entities: [...leaseEntities], extra: { max: 4 } });
  await dataSource.initialize();
  const options = { heartbeatIntervalMs: 60_000, leaseTimeoutMs: 600_000 };
  const service = new LeaseService(dataSource, { ...options, createSchema: true });
  const client = new pg.Client({ connectionString: url, application_name: 'bench-history' });
  try {
    await service.init();
    await client.connect();
    const leases: Lease[] = [];
    for (let i = 0; i < 100; i++) leases.push((await service.tryAcquire(`bench:history:${i}`))!);
    const pool = (dataSource.driver as unknown as { master: pg.Pool }).master;
    const store = new LeaseStore(pool, { withSession: (work) => work(client) }, resolveLeaseOptions(options));
    const { systemId } = await store.serverHistory();

    const batches = { '1 lease': leases.slice(0, 1), '100 leases': leases };
    const samples: Record<string, { without: number[]; with: number[] }> = {};
    for (const name of Object.keys(batches)) samples[name] = { without: [], with: [] };
    const renew = async (batch: typeof leases, checked: boolean) => {
      const started = performance.now();
      const result = await store.renew(
        batch.map((lease) => lease.targetKey),
        batch.map((lease) => lease.token),
        5_000,
        checked ? { fencingTokens: batch.map((lease) => lease.fencingToken), systemId } : undefined,
      );
      if (result.kept.size !== batch.length) throw new Error(`renewed ${result.kept.size} of ${batch.length}`);
      return performance.now() - started;
    };
    for (let round = -200; round < rounds; round++) {
      for (const [name, batch] of Object.entries(batches)) {
        const order = round % 2 === 0 ? [false, true] : [true, false];
        for (const checked of order) {
          const ms = await renew(batch, checked);
          if (round >= 0) samples[name]![checked ? 'with' : 'without'].push(ms);
        }
      }
    }

    const version = (await client.query<{ v: string }>('SHOW server_version')).rows[0]!.v;
    console.log(`\nThe history check's cost — PostgreSQL ${version}, loopback, ${rounds} interleaved rounds\n`);
    console.log('| renewal (BEGIN + UPDATE + COMMIT) | without the check p50 / p90 / mean | with it | p50 difference |');
    console.log('|---|---|---|---|');
    for (const [name, { without, with: checked }] of Object.entries(samples)) {
      const a = summary(without);
      const b = summary(checked);
      console.log(`| ${name} | ${fmt(a.p50)} / ${fmt(a.p90)} / ${fmt(a.mean)} | ${fmt(b.p50)} / ${fmt(b.p90)} / `
        + `${fmt(b.mean)} | ${(b.p50 - a.p50 >= 0 ? '+' : '')}${fmt(b.p50 - a.p50)} |`);
    }

    // The expressions alone, inside the server.
    const { rows } = await client.query<{ what: string; us: number }>(`
      CREATE TEMP SEQUENCE bench_history_seq;
      CREATE FUNCTION pg_temp.time_it(what text, expression text, n int) RETURNS TABLE (what text, us float8)
      LANGUAGE plpgsql AS $$
      DECLARE started timestamptz; x text;
      BEGIN
        started := clock_timestamp();
        FOR i IN 1..n LOOP EXECUTE 'SELECT (' || expression || ')::text' INTO x; END LOOP;
        RETURN QUERY SELECT what, extract(epoch FROM clock_timestamp() - started) * 1e6 / n;
      END $$;
      SELECT * FROM pg_temp.time_it('SELECT 1 (the loop itself)', '1', 20000)
      UNION ALL SELECT * FROM pg_temp.time_it('nextval (before)', $q$nextval('bench_history_seq')$q$, 20000)
      UNION ALL SELECT * FROM pg_temp.time_it('the token expression (timeline << 40 | nextval)', $q$(SELECT CASE
          WHEN s.v BETWEEN 0 AND 1099511627775 AND h.timeline < 8388608 THEN (h.timeline << 40) | s.v END
        FROM (SELECT nextval('bench_history_seq') AS v) s,
          (SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint AS timeline) h)$q$,
        20000)
      UNION ALL SELECT * FROM pg_temp.time_it('the history probe, without the system identifier', $q$(SELECT
        row(pg_is_in_recovery(), CASE WHEN NOT pg_is_in_recovery()
          THEN ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END))$q$, 20000)
      UNION ALL SELECT * FROM pg_temp.time_it('the history probe, with it (pg_control_system reads pg_control)',
        $q$(SELECT row(pg_is_in_recovery(), CASE WHEN NOT pg_is_in_recovery()
          THEN ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END,
          (SELECT system_identifier FROM pg_catalog.pg_control_system())))$q$, 20000)`).then(
      (results) => ({ rows: ([] as pg.QueryResult[]).concat(results as unknown as pg.QueryResult).at(-1)!.rows }),
    );
    console.log('\n| expression, evaluated inside the server (20,000 times) | µs each |');
    console.log('|---|---|');
    for (const row of rows) console.log(`| ${row.what} | ${row.us.toFixed(2)} |`);
    console.log('');
    for (const lease of leases) await lease.release();
  } finally {
    await client.end().catch(() => undefined);
    await service.close();
    await dataSource.destroy();
    await dropDatabase(serverUrl, url);
    await server?.destroy();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
