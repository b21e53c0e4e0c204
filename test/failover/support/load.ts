/**
 * Load through the library's own API: several "processes" (a LeaseService on a DataSource of its own each, so each
 * has its own pool, heartbeat connection and owner identity, as separate processes would), each running a few
 * client loops of acquire → simulated work → fenced write → release on a shared set of keys. Everything a checker
 * needs is recorded on one monotonic clock (all clients live in this process): every grant (key, fencing token,
 * lease token, when it was granted, when its signal aborted and why, whether its release was acknowledged) and every
 * fenced write (when it started, when it settled, acknowledged / refused / failed).
 */
import { randomUUID } from 'node:crypto';
import { LeaseLostError, LeaseService, leaseEntities, type Lease, type LeaseModuleOptions } from 'nest-pg-lease';
import { DataSource, type EntityManager } from 'typeorm';
import { sleep } from '../../support/sleep.js';
import { mergeLeaseOptions } from '../../../libs/lease/src/internal.js';

export interface WriteRecord {
  opId: string;
  startedAt: number;
  settledAt: number;
  /** ack: committed (the client heard so); refused: LeaseLostError, nothing written; error: outcome unknown. */
  outcome: 'ack' | 'refused' | 'error';
  error?: string;
}

export interface GrantRecord {
  client: number;
  process: number;
  key: string;
  fencingToken: bigint;
  leaseToken: string;
  grantedAt: number;
  /** When the lease's signal aborted: lost (told) or released (the holder stopped by itself). */
  endedAt?: number;
  endReason?: 'lost' | 'released';
  lostReason?: string;
  /** The release deleted the row and the client heard so. */
  releaseAckedAt?: number;
  writes: WriteRecord[];
}

export interface LoadPlan {
  processes: number;
  loopsPerProcess: number;
  keys: string[];
  lease: LeaseModuleOptions;
  /** Loops (by global index) that hold their leases long, like slow external calls: [min, max] ms of work. */
  longLoops: number;
  longWorkMs: [number, number];
  shortWorkMs: [number, number];
  /**
   * Loops (by global index, counted from the last) that wait in the key's line (`acquire`, bounded by a signal after
   * `waitMs`) instead of `tryAcquire`: grants by handoff to a waiter. @default 0
   */
  waitingLoops?: number;
  /** @default 1000 */
  waitMs?: number;
}

/** The tables of the checker: every committed fenced write appends one history row and bumps its key's counter. */
export const HISTORY_DDL = [
  `CREATE SEQUENCE failover_commit_seq AS bigint`,
  `CREATE TABLE failover_history (op_id uuid PRIMARY KEY, target text NOT NULL, fencing_token bigint NOT NULL,
    lease_token uuid NOT NULL, client integer NOT NULL, commit_seq bigint NOT NULL, at timestamptz NOT NULL)`,
  `CREATE TABLE failover_counter (target text PRIMARY KEY, n bigint NOT NULL)`,
];

const between = ([min, max]: [number, number]) => min + Math.random() * (max - min);

export interface LoadStats {
  busy: number;
  errors: number;
  /** Waits of the waiting loops that ended at their bound without a grant. */
  waitTimeouts: number;
}

export class Load {
  readonly grants: GrantRecord[] = [];
  readonly stats: LoadStats = { busy: 0, errors: 0, waitTimeouts: 0 };
  private readonly services: Array<{ service: LeaseService; dataSource: DataSource }> = [];
  private readonly loops: Promise<void>[] = [];
  private stopping = false;
  private readonly halted = new AbortController();

  constructor(
    private readonly url: string,
    private readonly plan: LoadPlan,
  ) {}

  /** Starts the processes (their DataSources connect now) and the loops. */
  async start(): Promise<void> {
    for (let p = 0; p < this.plan.processes; p++) {
      const dataSource = new DataSource({
        type: 'postgres',
        url: this.url,
        entities: [...leaseEntities],
        extra: { max: this.plan.loopsPerProcess + 2, application_name: `failover-p${p}` },
      });
      await dataSource.initialize();
      const service = new LeaseService(dataSource, mergeLeaseOptions(this.plan.lease, { owner: `failover-p${p}` }));
      await service.init();
      this.watchReleases(service, p);
      this.services.push({ service, dataSource });
    }
    for (let p = 0; p < this.plan.processes; p++) {
      for (let l = 0; l < this.plan.loopsPerProcess; l++) {
        const client = p * this.plan.loopsPerProcess + l;
        this.loops.push(this.loop(p, client));
      }
    }
  }

  /** Stops the loops, waits for them, and closes every process (releasing what they hold). */
  async stop(): Promise<void> {
    this.stopping = true;
    this.halted.abort();
    await Promise.all(this.loops);
    for (const { service, dataSource } of this.services) {
      await service.close();
      await dataSource.destroy().catch(() => undefined);
    }
  }

  /** Released events carry the key and fencing token: match them to this process's latest such grant. */
  private watchReleases(service: LeaseService, process: number): void {
    service.events$.subscribe((event) => {
      if (event.type !== 'released') return;
      const at = performance.now();
      for (let i = this.grants.length - 1; i >= 0; i--) {
        const grant = this.grants[i];
        if (grant.process === process && grant.key === event.targetKey && grant.fencingToken === event.fencingToken) {
          grant.releaseAckedAt ??= at;
          return;
        }
      }
    });
  }

  private async loop(process: number, client: number): Promise<void> {
    const { service } = this.services[process];
    const long = client < this.plan.longLoops;
    const clients = this.plan.processes * this.plan.loopsPerProcess;
    const waiting = client >= clients - (this.plan.waitingLoops ?? 0);
    const keys = this.plan.keys;
    while (!this.stopping) {
      const key = keys[Math.floor(Math.random() * keys.length)];
      let lease: Lease | null;
      try {
        lease = waiting
          ? await service.acquire(key, { signal: AbortSignal.timeout(this.plan.waitMs ?? 1_000) })
          : await service.tryAcquire(key);
      } catch (error) {
        if (waiting && error instanceof DOMException && error.name === 'TimeoutError') {
          this.stats.waitTimeouts++;
          continue;
        }
        // The database is away (crashed, not promoted yet): back off and try again.
        this.stats.errors++;
        await sleep(20 + Math.random() * 50);
        continue;
      }
      if (!lease) {
        this.stats.busy++;
        await sleep(2 + Math.random() * 8);
        continue;
      }
      const grant = this.record(lease, process, client);
      await sleep(between(long ? this.plan.longWorkMs : this.plan.shortWorkMs), lease.signal);
      // Written even when the signal aborted: the fence, not the caller's diligence, must refuse it.
      await this.write(lease, grant);
      await lease.release();
    }
  }

  /**
   * A long job: `key` (one no loop uses) acquired now on `process`, held — heartbeating — until its lease is lost or
   * the load stops, then a fenced write (refused when lost) and the release. Recorded like every grant, as client
   * `processes × loopsPerProcess + n`. Resolves with its grant.
   */
  async hold(process: number, key: string, n: number): Promise<GrantRecord> {
    const lease = await this.services[process].service.tryAcquire(key);
    if (!lease) throw new Error(`hold: ${key} is busy`);
    const grant = this.record(lease, process, this.plan.processes * this.plan.loopsPerProcess + n);
    this.loops.push(
      (async () => {
        const until = AbortSignal.any([lease.signal, this.halted.signal]);
        if (!until.aborted) await new Promise((resolve) => until.addEventListener('abort', resolve, { once: true }));
        await this.write(lease, grant);
        await lease.release();
      })(),
    );
    return grant;
  }

  private record(lease: Lease, process: number, client: number): GrantRecord {
    const grant: GrantRecord = {
      client,
      process,
      key: lease.targetKey,
      fencingToken: lease.fencingToken,
      leaseToken: lease.token,
      grantedAt: performance.now(),
      writes: [],
    };
    this.grants.push(grant);
    const ended = () => {
      grant.endedAt = performance.now();
      const reason = lease.signal.reason;
      grant.endReason = reason instanceof LeaseLostError ? 'lost' : 'released';
      if (reason instanceof LeaseLostError) grant.lostReason = reason.reason;
    };
    if (lease.signal.aborted) ended();
    else lease.signal.addEventListener('abort', ended, { once: true });
    return grant;
  }

  private async write(lease: Lease, grant: GrantRecord): Promise<void> {
    const opId = randomUUID();
    const startedAt = performance.now();
    let outcome: WriteRecord['outcome'] = 'ack';
    let error: string | undefined;
    try {
      await lease.fenced((manager) => historyWrite(manager, lease, opId, grant.client));
    } catch (caught) {
      outcome = caught instanceof LeaseLostError ? 'refused' : 'error';
      error = String(caught);
    }
    grant.writes.push({ opId, startedAt, settledAt: performance.now(), outcome, error });
  }
}

async function historyWrite(manager: EntityManager, lease: Lease, opId: string, client: number): Promise<void> {
  // A read-modify-write counter: two writers inside what should be exclusive would lose an update.
  const [counter] = await manager.query('SELECT n FROM failover_counter WHERE target = $1', [lease.targetKey]);
  await manager.query(
    `INSERT INTO failover_history (op_id, target, fencing_token, lease_token, client, commit_seq, at)
     VALUES ($1, $2, $3, $4, $5, nextval('failover_commit_seq'), clock_timestamp())`,
    [opId, lease.targetKey, lease.fencingToken.toString(), lease.token, client],
  );
  await manager.query('UPDATE failover_counter SET n = $2 WHERE target = $1', [lease.targetKey, Number(counter.n) + 1]);
}
