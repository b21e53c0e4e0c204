/**
 * A crash right after grants were acknowledged, with the application role's default `synchronous_commit = off`
 * (issue 21 item 7): every acknowledged grant survives the crash, and no later grant reuses a fencing token handed out
 * before it. A dedicated embedded server (never the shared one), crashed by an immediate shutdown (SIGQUIT to the
 * postmaster) and started again; `wal_writer_delay` is raised so that a commit that did not wait for the WAL flush is
 * certainly lost. Skipped with DATABASE_URL: an external server cannot be crashed from here.
 */
import { readFileSync } from 'node:fs';
import { createDatabase, startPostgres } from '@app/pg-harness';
import { LeaseService, leaseEntities, type Lease } from 'nest-pg-lease';
import { DataSource } from 'typeorm';
import { resolveLeaseOptions, schemaStatements } from '../../libs/lease/src/internal.js';
import { connect, LEASE, sleep } from './support/harness.js';
import { recordScenario } from './support/report.js';

const external = Boolean(process.env.DATABASE_URL);
const GRANTS = 6;

/** The postmaster's pid: the parent of one of its backends. */
function postmasterOf(backendPid: number): number {
  const stat = readFileSync(`/proc/${backendPid}/stat`, 'utf8');
  // pid (comm) state ppid …; comm may contain spaces or parentheses: read after the last ')'.
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

(external ? test.skip : test)(
  'acknowledged grants survive a crash whatever the role default of synchronous_commit',
  async () => {
    const started = performance.now();
    const server = await startPostgres();
    try {
      const url = await createDatabase(server.url, 'durability');
      const admin = await connect(url);
      // The tables first, durably (this session began before the role default below).
      for (const statement of schemaStatements(resolveLeaseOptions({}))) await admin.query(statement);
      const database = new URL(url).pathname.slice(1);
      await admin.query(`ALTER ROLE CURRENT_USER IN DATABASE "${database}" SET synchronous_commit = off`);
      // Commits that do not wait for the flush are written out only every 10 s: a crash before that loses them all.
      await admin.query(`ALTER SYSTEM SET wal_writer_delay = '10s'`);
      await admin.query('SELECT pg_reload_conf()');
      const { rows: pidRows } = await admin.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      const postmaster = postmasterOf(pidRows[0].pid);
      await admin.end();

      const dataSource = new DataSource({ type: 'postgres', url, entities: [...leaseEntities], extra: { max: 2 } });
      await dataSource.initialize();
      const leases = new LeaseService(dataSource, LEASE);
      await leases.init();
      const granted: Lease[] = [];
      for (let i = 0; i < GRANTS; i++) granted.push((await leases.tryAcquire(`durable:${i}`))!);
      // Crash right after the last acknowledgement: an immediate shutdown writes nothing more.
      process.kill(postmaster, 'SIGQUIT');
      await server.stop();
      await leases.close().catch(() => undefined);
      await dataSource.destroy().catch(() => undefined);
      await sleep(200);
      await server.start();

      const after = await connect(url);
      try {
        const { rows } = await after.query<{ target_id: string; token: string | null; fencing: string }>(
          `SELECT target_id, lease_token::text AS token, fencing_token::text AS fencing FROM job_lease`,
        );
        const found = new Map(rows.map((row) => [row.target_id, row]));
        const lost = granted.filter((lease) => found.get(lease.targetKey)?.token !== lease.token);
        // The next grant outranks every acknowledged one.
        const { rows: next } = await after.query<{ v: string }>(
          `SELECT last_value::text AS v FROM job_lease_fencing_seq`,
        );
        const highest = granted.reduce((max, lease) => (lease.fencingToken > max ? lease.fencingToken : max), 0n);
        recordScenario({
          scenario: 'crash after grants, role default synchronous_commit = off',
          faults: `immediate shutdown right after ${GRANTS} acknowledged grants (wal_writer_delay 10 s)`,
          writes: `${GRANTS - lost.length} of ${GRANTS} acknowledged grants found after the restart`,
          violations: lost.length,
          wallMs: performance.now() - started,
        });
        expect(lost.map((lease) => lease.targetKey)).toEqual([]);
        expect(BigInt(next[0].v)).toBeGreaterThanOrEqual(highest & ((1n << 47n) - 1n));
      } finally {
        await after.end();
      }
    } finally {
      await server.destroy();
    }
  },
);
