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
import { ownRow, resolveLeaseOptions, LeaseStore, mergeLeaseOptions } from '../libs/lease/src/internal.js';

const rounds = Number(process.argv.find((arg) => arg.startsWith('--rounds='))?.split('=')[1] ?? 3_000);

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
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
  // The service's own heartbeat must stay away for the whole run: its tick locks the rows, and the bench's renewal
  // then skips them (SKIP LOCKED) — rightly not counted as kept.
  const options = { timing: { heartbeatIntervalMs: 3_600_000, leaseTimeoutMs: 36_000_000 } };
  const service = new LeaseService(dataSource, mergeLeaseOptions(options, { tables: { createSchema: true } }));
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
    // Variants: no check; the check without the system identifier (a role that may not read it); the full check.
    const variants = ['without', 'timeline', 'full'] as const;
    type Variant = (typeof variants)[number];
    const samples: Record<string, Record<Variant, number[]>> = {};
    for (const name of Object.keys(batches)) samples[name] = { without: [], timeline: [], full: [] };
    const renew = async (batch: Lease[], variant: Variant) => {
      store.readSystemId(variant === 'full');
      const started = performance.now();
      const result = await store.renew(
        batch.map((lease) => ownRow(lease.targetKey)),
        batch.map((lease) => lease.token),
        5_000,
        variant === 'without' ? undefined : { fencingTokens: batch.map((lease) => lease.fencingToken), systemId },
      );
      if (result.kept.size !== batch.length) throw new Error(`renewed ${result.kept.size} of ${batch.length}`);
      return performance.now() - started;
    };
    for (let round = -200; round < rounds; round++) {
      for (const [name, batch] of Object.entries(batches)) {
        const order = round % 2 === 0 ? [...variants] : [...variants].reverse();
        for (const variant of order) {
          const ms = await renew(batch, variant);
          if (round >= 0) samples[name][variant].push(ms);
        }
      }
    }

    const version = (await client.query<{ server_version: string }>('SHOW server_version')).rows[0].server_version;
    console.log(`\nThe history check's cost — PostgreSQL ${version}, loopback, ${rounds} interleaved rounds\n`);
    console.log(
      '| renewal (BEGIN + UPDATE + COMMIT), p50 / p90 / mean | without the check | the check, timeline and ' +
        'recovery only | the full check (+ system identifier) |',
    );
    console.log('|---|---|---|---|');
    for (const [name, byVariant] of Object.entries(samples)) {
      const base = summary(byVariant.without);
      const cells = variants.map((variant) => {
        const { p50, p90, mean } = summary(byVariant[variant]);
        const diff = variant === 'without' ? '' : ` (p50 ${p50 - base.p50 >= 0 ? '+' : ''}${fmt(p50 - base.p50)})`;
        return `${fmt(p50)} / ${fmt(p90)} / ${fmt(mean)}${diff}`;
      });
      console.log(`| ${name} | ${cells.join(' | ')} |`);
    }

    // The expressions alone, inside the server: static statements in a PL/pgSQL loop (planned once), no round trips.
    const timeline = `('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint`;
    const expressions: Array<[string, string]> = [
      ['nothing (the loop itself)', 'SELECT 1 INTO x'],
      ['nextval (the token before)', `SELECT nextval('bench_history_seq') INTO x`],
      [
        'the token: timeline << 47 or nextval, with the 2^47 guard',
        `SELECT (SELECT CASE
          WHEN s.v BETWEEN 0 AND 140737488355327 AND h.timeline < 65536 THEN (h.timeline << 47) | s.v END
        FROM (SELECT nextval('bench_history_seq') AS v) s, (SELECT ${timeline} AS timeline) h) INTO x`,
      ],
      [
        'the history probe, recovery and timeline',
        `SELECT CASE WHEN NOT pg_is_in_recovery() THEN ${timeline} END
        INTO x WHERE NOT pg_is_in_recovery() OR true`,
      ],
      [
        'the system identifier (pg_control_system reads the control file)',
        'SELECT system_identifier FROM pg_catalog.pg_control_system() INTO x',
      ],
    ];
    await client.query('CREATE TEMP SEQUENCE bench_history_seq');
    console.log('\n| expression, evaluated inside the server (20,000 times, static SQL) | µs each |');
    console.log('|---|---|');
    for (const [what, statement] of expressions) {
      const { rows } = await client
        .query<{ us: number }>(
          `CREATE OR REPLACE FUNCTION pg_temp.time_it() RETURNS float8
        LANGUAGE plpgsql AS $$
        DECLARE started timestamptz := clock_timestamp(); x bigint;
        BEGIN
          FOR i IN 1..20000 LOOP ${statement}; END LOOP;
          RETURN extract(epoch FROM clock_timestamp() - started) * 1e6 / 20000;
        END $$;
        SELECT pg_temp.time_it() AS us`,
        )
        .then((results) =>
          ([] as pg.QueryResult<{ us: number }>[]).concat(results as unknown as pg.QueryResult<{ us: number }>).at(-1)!,
        );
      console.log(`| ${what} | ${rows[0].us.toFixed(2)} |`);
    }
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
