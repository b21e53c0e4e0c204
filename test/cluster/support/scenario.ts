/**
 * One cluster run: a fresh Patroni cluster (synchronous mode), the failover suite's load through HAProxy, two long
 * jobs held across the event, the event (the leader's postmaster killed with SIGKILL, the leader cut off from etcd,
 * or a planned `patronictl switchover`), the promoted node's lease rows read before any client reaches it, load
 * until the old leases have had time to end, then the failover suite's checker.
 */
import { join } from 'node:path';
import { LeaseService, leaseEntities, type LeaseModuleOptions } from 'nest-pg-lease';
import pg from 'pg';
import { DataSource } from 'typeorm';
import {
  checkFailover,
  type FailoverFindings,
  type FailoverMoments,
  type HistoryRow,
  type SurvivingRow,
} from '../../failover/support/checker.js';
import { type GrantRecord, HISTORY_DDL, Load, type LoadPlan } from '../../failover/support/load.js';
import { toldWithinMs } from '../../failover/support/scenario.js';
import { type PatroniCluster, type PatroniNode } from './patroni.js';
import { watchOldLeader, watchPromotion, watchRouting } from './watch.js';

export const ARTIFACTS = join(process.cwd(), 'artifacts', 'cluster');

export type ClusterEvent = 'kill' | 'cut-off' | 'switchover';

export interface ClusterScenario {
  name: string;
  event: ClusterEvent;
  /**
   * false: the negative control. The application's role may not execute `pg_current_wal_lsn()` (EXECUTE revoked from
   * PUBLIC), so the library runs in its fixed-timeline mode — docs/failover.md's "timeline guard is off" — and sees no
   * failover.
   */
  timelineGuard: boolean;
}

/** Heartbeats every 500 ms (as the failover suite); an 8 s lease outlives a killed leader's failover (2–4 s). */
export const LEASE: LeaseModuleOptions = {
  timing: { heartbeatIntervalMs: 500, leaseTimeoutMs: 8_000, waitPollIntervalMs: 500, shutdownGraceMs: 0 },
};

/** 12 clients (6 processes × 2 loops) on 12 keys: 2 hold for seconds, 4 wait in line, the rest try and go. */
export const PLAN: LoadPlan = {
  processes: 6,
  loopsPerProcess: 2,
  keys: Array.from({ length: 12 }, (_, i) => `k${i}`),
  lease: LEASE,
  longLoops: 2,
  longWorkMs: [500, 3_000],
  shortWorkMs: [0, 10],
  waitingLoops: 4,
  waitMs: 1_500,
};
const HOLD_KEYS = ['hold-0', 'hold-1'];
const WARM_UP_MS = 3_000;
const APP_PASSWORD = 'app-password';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export interface ClusterRun {
  scenario: ClusterScenario;
  findings: FailoverFindings;
  oldLeader: string;
  newLeader: string;
  timelineBefore: number;
  timelineAfter: number;
  /**
   * Relative to the event (ms): the old leader last seen writable, the new one out of recovery, HAProxy sending the
   * application there (the switch: old leases must end within two heartbeat intervals + 1 s of it).
   */
  oldLeaderLastWritableMs: number;
  promotedMs: number;
  switchMs: number;
  /** The new leader out of recovery → the first grant on it (the library's recovery, without restarts). */
  recoveryMs: number;
  /** The last grant on the old leader → the first on the new one. */
  noGrantsMs: number;
  grants: number;
  fencedWrites: { acknowledged: number; refused: number; failed: number };
  /** Grants before the switch whose token does not carry the old leader's timeline (with the guard on: none). */
  grantsBeforeOffTimeline: number;
  /** Grants after the switch whose token does not carry the new timeline (with the guard on: none). */
  grantsOffTimeline: number;
  writesAfterSwitchByProcess: number[];
  /** The long jobs held across the event: how each ended, ms after the switch. */
  holds: string[];
  waitTimeouts: number;
  busy: number;
  errors: number;
  eventOutput?: string;
  wallMs: number;
}

async function asSuperuser(url: string, statements: string[]): Promise<void> {
  const client = new pg.Client({ connectionString: url, application_name: 'cluster-suite' });
  // A node Patroni restarts (a demoted leader) ends its sessions with 57P01: a FATAL that arrives while the client
  // is idle or ending is emitted as 'error', which without a listener throws (its query still rejects).
  client.on('error', () => undefined);
  await client.connect();
  try {
    for (const statement of statements) await client.query(statement);
  } finally {
    await client.end();
  }
}

/** The application's role and a database of the run's own, the library's tables (its bootstrap) and the checker's. */
async function prepare(cluster: PatroniCluster, leader: PatroniNode, database: string, guard: boolean): Promise<void> {
  await asSuperuser(cluster.urlOf(leader), [
    `DO $$ BEGIN CREATE ROLE app LOGIN PASSWORD '${APP_PASSWORD}'; EXCEPTION WHEN duplicate_object THEN NULL; END $$`,
    `CREATE DATABASE ${database} OWNER app`,
  ]);
  if (!guard) {
    // Function rights are per database: only this run's application loses the WAL functions.
    await asSuperuser(cluster.urlOf(leader, database), [
      `REVOKE EXECUTE ON FUNCTION pg_catalog.pg_current_wal_lsn() FROM PUBLIC`,
    ]);
  }
  const url = `postgres://app:${APP_PASSWORD}@127.0.0.1:${leader.pgPort}/${database}`;
  const dataSource = new DataSource({ type: 'postgres', url, entities: [...leaseEntities] });
  await dataSource.initialize();
  try {
    const service = new LeaseService(dataSource, { tables: { createSchema: true } });
    await service.init();
    await service.close();
    for (const statement of HISTORY_DDL) await dataSource.query(statement);
    await dataSource.query(`INSERT INTO failover_counter SELECT unnest($1::text[]), 0`, [[...PLAN.keys, ...HOLD_KEYS]]);
  } finally {
    await dataSource.destroy();
  }
}

async function read<R extends pg.QueryResultRow>(url: string, text: string): Promise<R[]> {
  const client = new pg.Client({ connectionString: url, application_name: 'cluster-checker' });
  // A node Patroni restarts (a demoted leader) ends its sessions with 57P01: a FATAL that arrives while the client
  // is idle or ending is emitted as 'error', which without a listener throws (its query still rejects).
  client.on('error', () => undefined);
  await client.connect();
  try {
    return (await client.query<R>(text)).rows;
  } finally {
    await client.end();
  }
}

const timelineOf = (token: bigint) => Number(token >> 47n);

/**
 * Runs one scenario on a settled cluster (a leader, a synchronous standby, a replica), in a database of its own; the
 * caller restores the cluster afterwards (`PatroniCluster.restore`).
 */
export async function runClusterScenario(
  scenario: ClusterScenario,
  cluster: PatroniCluster,
  database: string,
): Promise<ClusterRun> {
  const started = performance.now();
  const { leader: old, sync } = await cluster.settled(true);
  if (!sync) throw new Error('synchronous mode: no synchronous standby');
  await prepare(cluster, old, database, scenario.timelineGuard);
  // Let the synchronous standby replay the bootstrap before the load starts.
  await cluster.settled(true);

  const load = new Load(cluster.url(database, 'app', APP_PASSWORD), PLAN);
  await load.start();
  let moments: FailoverMoments;
  let surviving: SurvivingRow[];
  let timelineAfter: number;
  let newLeader: PatroniNode;
  let eventAt: number;
  let lastWritableAt: number;
  let eventOutput: string | undefined;
  let holds: GrantRecord[];
  let timelineBefore: number;
  try {
    await sleep(WARM_UP_MS);
    holds = await Promise.all(HOLD_KEYS.map((key, n) => load.hold(n, key, n)));
    timelineBefore = (await cluster.members()).find((m) => m.name === old.name)?.timeline ?? NaN;
    // The candidates serve no client (HAProxy sends clients to the leader only): close their gates, so the promoted
    // node's rows are read before any client reaches it; the one promoted opens at once after.
    const candidates = cluster.nodes.filter((node) => node !== old);
    for (const node of candidates) node.gate.point(undefined);
    const promotion = watchPromotion(cluster, candidates, database);
    const oldLeader = watchOldLeader(cluster, old);
    eventAt = performance.now();
    let switchover: Promise<string> | undefined;
    if (scenario.event === 'kill') process.kill(cluster.postmasterPid(old), 'SIGKILL');
    else if (scenario.event === 'cut-off') old.etcdLink.blackhole();
    else switchover = cluster.switchover(old, sync);
    const promoted = await promotion.done;
    newLeader = promoted.node;
    for (const node of candidates) node.gate.point(node.pgPort);
    // The application's switch: HAProxy sends it to the new leader once Patroni's REST API says so and a check ran.
    const routedAt = await watchRouting(cluster, newLeader);
    lastWritableAt = Math.max(eventAt, await oldLeader.lastWritableAt);
    eventOutput = await switchover;
    surviving = promoted.rows;
    timelineAfter = promoted.timeline;
    // A client may get through a moment before the probe does: its grant (on the new timeline) marks the switch then.
    const firstNew = load.grants.find((g) => scenario.timelineGuard && timelineOf(g.fencingToken) === timelineAfter);
    const switchAt = Math.min(routedAt, firstNew?.grantedAt ?? Infinity);
    moments = { crashAt: lastWritableAt, promotedAt: promoted.at, switchAt };
    // Long enough for every old lease to be told (two heartbeat intervals + 1 s) and for every process to work again.
    await sleep(toldWithinMs(LEASE) + 3_000);
  } finally {
    await load.stop();
  }

  type HistoryText = Record<'op_id' | 'target' | 'fencing_token' | 'lease_token' | 'commit_seq', string>;
  const url = cluster.urlOf(newLeader, database);
  const history = (
    await read<HistoryText>(
      url,
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
    (await read<{ target: string; n: string }>(url, `SELECT target, n::text FROM failover_counter`)).map((row) => [
      row.target,
      BigInt(row.n),
    ]),
  );
  const findings = checkFailover(load.grants, moments, surviving, history, counters, toldWithinMs(LEASE));

  const before = load.grants.filter((g) => g.grantedAt < moments.switchAt);
  const after = load.grants.filter((g) => g.grantedAt >= moments.switchAt);
  const firstAfter = Math.min(...after.map((g) => g.grantedAt));
  const lastBefore = Math.max(...before.map((g) => g.grantedAt));
  const writes = load.grants.flatMap((g) => g.writes);
  const count = (outcome: string) => writes.filter((w) => w.outcome === outcome).length;
  return {
    scenario,
    findings,
    oldLeader: old.name,
    newLeader: newLeader.name,
    timelineBefore,
    timelineAfter,
    oldLeaderLastWritableMs: lastWritableAt - eventAt,
    promotedMs: moments.promotedAt - eventAt,
    switchMs: moments.switchAt - eventAt,
    recoveryMs: firstAfter - moments.promotedAt,
    noGrantsMs: firstAfter - lastBefore,
    grants: load.grants.length,
    fencedWrites: { acknowledged: count('ack'), refused: count('refused'), failed: count('error') },
    grantsBeforeOffTimeline: before.filter((g) => timelineOf(g.fencingToken) !== timelineBefore).length,
    grantsOffTimeline: after.filter((g) => timelineOf(g.fencingToken) !== timelineAfter).length,
    writesAfterSwitchByProcess: Array.from(
      { length: PLAN.processes },
      (_, p) =>
        load.grants.filter(
          (g) => g.process === p && g.writes.some((w) => w.outcome === 'ack' && w.startedAt >= moments.switchAt),
        ).length,
    ),
    holds: holds.map(
      (g) =>
        `${g.key}: ${g.endedAt === undefined ? 'never ended' : `${g.endReason}${g.lostReason ? ` (${g.lostReason})` : ''} ${Math.round(g.endedAt - moments.switchAt)} ms after the switch`}`,
    ),
    waitTimeouts: load.stats.waitTimeouts,
    busy: load.stats.busy,
    errors: load.stats.errors,
    eventOutput,
    wallMs: performance.now() - started,
  };
}
