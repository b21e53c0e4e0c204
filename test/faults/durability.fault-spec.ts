/**
 * A crash right after grants were acknowledged, with the application role's default `synchronous_commit = off`
 * (issue 21 item 7): every acknowledged grant survives the crash, and no later grant reuses a fencing token handed out
 * before it. And a crash right after a handed-over grant was confirmed (issue 38 item 1): the row keeps the holder's
 * lease timeout, and nobody else is granted the key while the holder holds it. A dedicated embedded server (never the shared one), crashed by an immediate shutdown (SIGQUIT to the
 * postmaster) and started again; `wal_writer_delay` is raised so that a commit that did not wait for the WAL flush is
 * certainly lost. Skipped with DATABASE_URL: an external server cannot be crashed from here.
 */
import { readFileSync } from 'node:fs';
import { createDatabase, startPostgres } from '@app/pg-harness';
import { LeaseService, LeaseWaitTimeoutError, leaseEntities, type Lease, type LeaseModuleOptions } from 'nest-pg-lease';
import { DataSource } from 'typeorm';
import {
  interceptHeadWakeups,
  resolveLeaseOptions,
  schemaStatements,
  mergeLeaseOptions,
} from '../../libs/lease/src/internal.js';
import { eventually } from '../support/db.js';
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

/**
 * A crash right after a handed-over grant was confirmed (issue 38 item 1). A release grants the head waiter in its
 * own (durable) commit, with the waiter's timeout on the row; the waiter's confirmation gives the row the holder's
 * lease timeout. The confirmation's answer is the holder's proof, and its local deadline counts from it: so the
 * confirmation must survive the crash, or another process is granted the key while the holder still holds it.
 */
const HANDOFF = mergeLeaseOptions(LEASE, {
  timing: { heartbeatIntervalMs: 5_000, leaseTimeoutMs: 20_000, waiterTimeoutMs: 1_500, waitPollIntervalMs: 30_000 },
});
/** Shorter than the holder's lease timeout (and than its local deadline): a live holder is never replaced in it. */
const OTHER_WAIT_MS = 4_000;
const HANDOFF_KEY = 'handoff:durable';

interface Opened {
  service: LeaseService;
  close(): Promise<void>;
}

async function openOn(url: string, owner: string, options: LeaseModuleOptions = {}): Promise<Opened> {
  const dataSource = new DataSource({ type: 'postgres', url, entities: [...leaseEntities], extra: { max: 2 } });
  await dataSource.initialize();
  const service = new LeaseService(dataSource, mergeLeaseOptions(HANDOFF, options, { owner }));
  await service.init();
  return {
    service,
    async close() {
      await service.close().catch(() => undefined);
      await dataSource.destroy().catch(() => undefined);
    },
  };
}

(external ? test.skip : test)(
  'a handed-over grant keeps the holder’s lease timeout through a crash right after its confirmation',
  async () => {
    const started = performance.now();
    const server = await startPostgres();
    const opened: Opened[] = [];
    try {
      const url = await createDatabase(server.url, 'handoff_durability');
      const admin = await connect(url);
      for (const statement of schemaStatements(resolveLeaseOptions({}))) await admin.query(statement);
      // A commit that does not wait for the flush is written out only every 10 s: a crash before that loses it.
      await admin.query(`ALTER SYSTEM SET wal_writer_delay = '10s'`);
      await admin.query('SELECT pg_reload_conf()');
      const { rows: pidRows } = await admin.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      const postmaster = postmasterOf(pidRows[0].pid);

      const holder = await openOn(url, 'holder');
      const heir = await openOn(url, 'heir');
      opened.push(holder, heir);
      const held = (await holder.service.tryAcquire(HANDOFF_KEY))!;
      // The grant's wake-up, delivered at once (a waiter heartbeat finding its row gone would confirm it too, through
      // the acquire statement: the NOTIFY is faster by far).
      const grants: Array<bigint | undefined> = [];
      interceptHeadWakeups(heir.service, (wakeup) => {
        grants.push(wakeup.grant);
        wakeup.deliver();
      });
      // The immediate shutdown is sent in the same turn as the confirmation's answer: nothing else commits between.
      let crashed = false;
      heir.service.events$.subscribe((event) => {
        if (event.type !== 'acquired' || event.targetKey !== HANDOFF_KEY || crashed) return;
        process.kill(postmaster, 'SIGQUIT');
        crashed = true;
      });
      const heirCall = heir.service.acquire(HANDOFF_KEY, { onBusy: { wait: { timeoutMs: 30_000 } } });
      await eventually(
        async () =>
          (
            await admin.query<{ queued: number; listening: number }>(
              `SELECT (SELECT count(*) FROM job_lease_waiter WHERE target_id = $1)::int AS queued,
                (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                  AND query LIKE 'LISTEN%')::int AS listening`,
              [HANDOFF_KEY],
            )
          ).rows[0],
        (row) => row.queued === 1 && row.listening === 1,
        'the heir queued and listening',
      );
      await admin.end();
      await held.release();
      const lease = await heirCall;
      expect(crashed).toBe(true);
      // Handed over by the release (the NOTIFY carried the grant), and confirmed.
      expect(grants).toEqual([lease.fencingToken]);
      await server.stop();
      await sleep(200);
      await server.start();

      const after = await connect(url);
      let row: { lease_token: string | null; lease_timeout_ms: number } | undefined;
      try {
        ({
          rows: [row],
        } = await after.query<{ lease_token: string | null; lease_timeout_ms: number }>(
          'SELECT lease_token::text AS lease_token, lease_timeout_ms FROM job_lease WHERE target_id = $1',
          [HANDOFF_KEY],
        ));
      } finally {
        await after.end();
      }
      // Another process asks with a wait shorter than the holder's lease timeout, and looks often (no NOTIFY says
      // when a row expires): the holder still holds the key.
      const other = await openOn(url, 'other', { timing: { waitPollIntervalMs: 200 } });
      opened.push(other);
      const asked = await other.service.acquire(HANDOFF_KEY, { onBusy: { wait: { timeoutMs: OTHER_WAIT_MS } } }).then(
        (taken) => ({ granted: true, heirHeld: lease.isHeld(), error: undefined, taken }),
        (error: unknown) => ({ granted: false, heirHeld: lease.isHeld(), error, taken: undefined }),
      );
      await asked.taken?.release();
      recordScenario({
        scenario: 'crash right after a handed-over grant was confirmed',
        faults: `immediate shutdown on the heir's 'acquired' event (wal_writer_delay 10 s); row after restart: timeout ${row?.lease_timeout_ms} ms`,
        writes: `another process ${asked.granted ? 'granted' : `refused (${(asked.error as Error).name})`} within ${OTHER_WAIT_MS} ms, heir held: ${asked.heirHeld}`,
        violations: asked.granted && asked.heirHeld ? 1 : 0,
        wallMs: performance.now() - started,
      });
      expect(row).toEqual({ lease_token: lease.token, lease_timeout_ms: HANDOFF.timing?.leaseTimeoutMs });
      expect({ granted: asked.granted, heirHeld: asked.heirHeld }).toEqual({ granted: false, heirHeld: true });
      expect(asked.error).toBeInstanceOf(LeaseWaitTimeoutError);
      await lease.release();
    } finally {
      for (const service of opened) await service.close();
      await server.destroy();
    }
  },
  60_000,
);
