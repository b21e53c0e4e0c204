/**
 * One failover run: a primary and a streaming standby, load through the library, an optional replication gap (the
 * link blackholed for `gapMs` before the crash), the primary crashed (immediate shutdown), the standby promoted, the
 * clients switched to it, load again until every old lease has expired, then the checker.
 */
import { join } from 'node:path';
import { LeaseService } from 'nest-pg-lease';
import pg from 'pg';
import { DataSource } from 'typeorm';
import { leaseEntities, type LeaseModuleOptions } from 'nest-pg-lease';
import {
  checkFailover,
  type FailoverFindings,
  type FailoverMoments,
  type HistoryRow,
  type SurvivingRow,
} from './checker.js';
import { makeSynchronous, promote, startReplicatedPair, type ReplicatedPair } from './cluster.js';
import { HISTORY_DDL, Load, type LoadPlan } from './load.js';
import { mergeLeaseOptions } from '../../../libs/lease/src/internal.js';

export const ARTIFACTS = join(process.cwd(), 'artifacts', 'failover');

export interface Scenario {
  /** Row label of the table. */
  name: string;
  synchronous: boolean;
  /** The replication link is blackholed this long before the crash (0: plain loopback, nothing held back). */
  gapMs: number;
  lease?: LeaseModuleOptions;
}

export interface RunResult {
  scenario: Scenario;
  findings: FailoverFindings;
  /** Fenced writes acknowledged after the switch, per process: every process must work again. */
  writesAfterSwitchByProcess: number[];
  timeline: number;
  /** Crash → clients switched, ms. */
  outageMs: number;
  /** Grants per second before the gap. */
  grantRate: number;
  /**
   * Heartbeat backends on the primary just before the crash (one per process is normal). A renewal the library
   * abandons at its client-side timeout keeps its server backend waiting (for the synchronous standby, or for the row
   * lock of the renewal that does), and the next tick opens another connection.
   */
  heartbeatBackends: number;
  /** The most heartbeat backends of one process (more than one: an abandoned renewal kept its backend). */
  heartbeatBackendsPerProcess: number;
  /** How long after the switch every lease of the old history must have ended (see checker.ts, old holders told). */
  toldWithinMs: number;
  busy: number;
  errors: number;
  wallMs: number;
}

/** Lease settings of the suite: a 4 s lease timeout as in the measurements, heartbeats every 500 ms. */
/** No shutdown grace: a scenario's processes close mid-load, as before the drain. */
export const LEASE: LeaseModuleOptions = {
  timing: { heartbeatIntervalMs: 500, leaseTimeoutMs: 4_000, waitPollIntervalMs: 500, shutdownGraceMs: 0 },
};

/**
 * The bound the suite asserts on telling old holders: the first renewal that reaches the promoted server tells them,
 * and it is sent within one heartbeat interval of the switch, or one more when a renewal was in flight (it gives up
 * after an interval); plus a second for connecting and for 7 processes on 2 shared cores.
 */
export function toldWithinMs(lease: LeaseModuleOptions): number {
  return 2 * (lease.timing?.heartbeatIntervalMs ?? 30_000) + 1_000;
}

/** 14 clients (7 processes × 2 loops) on 16 keys; 3 of them hold their leases for seconds (slow external calls). */
export function plan(lease: LeaseModuleOptions): LoadPlan {
  return {
    processes: 7,
    loopsPerProcess: 2,
    keys: Array.from({ length: 16 }, (_, i) => `k${i}`),
    lease,
    longLoops: 3,
    longWorkMs: [500, 3_000],
    shortWorkMs: [0, 10],
  };
}

const WARM_UP_MS = 3_000;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function query<R extends pg.QueryResultRow>(url: string, text: string): Promise<R[]> {
  const client = new pg.Client({ connectionString: url, application_name: 'failover-checker' });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return (await client.query<R>(text)).rows;
  } finally {
    await client.end();
  }
}

async function prepare(url: string, keys: string[]): Promise<void> {
  // The library's own bootstrap makes its tables; then the checker's.
  const dataSource = new DataSource({ type: 'postgres', url, entities: [...leaseEntities] });
  await dataSource.initialize();
  try {
    const service = new LeaseService(dataSource, { tables: { createSchema: true } });
    await service.init();
    await service.close();
    for (const statement of HISTORY_DDL) await dataSource.query(statement);
    await dataSource.query(`INSERT INTO failover_counter SELECT unnest($1::text[]), 0`, [keys]);
  } finally {
    await dataSource.destroy();
  }
}

/** Runs one scenario; the two server logs go to `logDir`. */
export async function runScenario(scenario: Scenario, logDir = ARTIFACTS): Promise<RunResult> {
  const started = performance.now();
  const lease = mergeLeaseOptions(LEASE, scenario.lease);
  const loadPlan = plan(lease);
  const pair: ReplicatedPair = await startReplicatedPair({
    logDir,
    prepare: (url) => prepare(url, loadPlan.keys),
  });
  try {
    if (scenario.synchronous) await makeSynchronous(pair);
    const load = new Load(pair.url, loadPlan);
    await load.start();
    let moments: FailoverMoments;
    let surviving: SurvivingRow[];
    let timeline: number;
    let grantRate: number;
    let heartbeatBackends: number[];
    try {
      const loadFrom = performance.now();
      await sleep(WARM_UP_MS);
      grantRate = load.grants.filter((g) => g.grantedAt >= loadFrom).length / ((performance.now() - loadFrom) / 1000);
      if (scenario.gapMs > 0) {
        // A partition between standby and primary: the primary goes on acknowledging (asynchronous) or waits
        // (synchronous); the standby falls behind.
        pair.link.blackhole();
        await sleep(scenario.gapMs);
      }
      heartbeatBackends = (
        await query<{ n: number }>(
          pair.urlOf(pair.primary, 'postgres'),
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE 'failover-p%:heartbeat'
         GROUP BY application_name`,
        )
      ).map((row) => row.n);
      const crashAt = performance.now();
      pair.front.point(undefined);
      await pair.primary.crash();
      pair.front.cut();
      pair.link.point(undefined);
      pair.link.cut();
      ({ timeline } = await promote(pair));
      const promotedAt = performance.now();
      // What the promoted standby knows of the leases, before any client reaches it.
      type Row = { target_id: string; lease_token: string | null; fencing_token: string; blocks_ms: number };
      surviving = (
        await query<Row>(
          pair.urlOf(pair.standby),
          // A released row (no lease token) blocks nothing: the load uses no holdAtLeastMs.
          `SELECT target_id, lease_token::text, fencing_token::text,
           CASE WHEN lease_token IS NULL THEN 0 ELSE greatest(0, extract(epoch FROM updated_at
             + lease_timeout_ms * interval '1 millisecond' - clock_timestamp()) * 1000) END::float8 AS blocks_ms
         FROM job_lease`,
        )
      ).map((row) => ({
        targetKey: row.target_id,
        leaseToken: row.lease_token,
        fencingToken: BigInt(row.fencing_token),
        blocksForMs: row.blocks_ms,
      }));
      pair.front.point(pair.standby.port);
      const switchAt = performance.now();
      moments = { crashAt, promotedAt, switchAt };
      // Long enough for every lease of the old history to expire and for its holders to find out.
      await sleep((lease.timing?.leaseTimeoutMs ?? 4_000) + 2_000);
    } finally {
      await load.stop();
    }

    type HistoryText = Record<'op_id' | 'target' | 'fencing_token' | 'lease_token' | 'commit_seq', string>;
    const history = (
      await query<HistoryText>(
        pair.urlOf(pair.standby),
        `SELECT op_id::text, target, fencing_token::text, lease_token::text, commit_seq::text FROM failover_history`,
      )
    ).map((row): HistoryRow => ({
      opId: row.op_id,
      target: row.target,
      fencingToken: BigInt(row.fencing_token),
      leaseToken: row.lease_token,
      commitSeq: BigInt(row.commit_seq),
    }));
    const counters = new Map(
      (
        await query<{ target: string; n: string }>(
          pair.urlOf(pair.standby),
          `SELECT target, n::text FROM failover_counter`,
        )
      ).map((row) => [row.target, BigInt(row.n)]),
    );
    const findings = checkFailover(load.grants, moments, surviving, history, counters, toldWithinMs(lease));
    const writesAfterSwitchByProcess = Array.from(
      { length: loadPlan.processes },
      (_, p) =>
        load.grants.filter(
          (g) => g.process === p && g.writes.some((w) => w.outcome === 'ack' && w.startedAt >= moments.switchAt),
        ).length,
    );
    return {
      scenario,
      findings,
      writesAfterSwitchByProcess,
      timeline,
      outageMs: moments.switchAt - moments.crashAt,
      grantRate,
      heartbeatBackends: heartbeatBackends.reduce((sum, n) => sum + n, 0),
      heartbeatBackendsPerProcess: Math.max(0, ...heartbeatBackends),
      toldWithinMs: toldWithinMs(lease),
      busy: load.stats.busy,
      errors: load.stats.errors,
      wallMs: performance.now() - started,
    };
  } finally {
    await pair.destroy();
  }
}
