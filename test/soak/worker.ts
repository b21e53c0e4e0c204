/**
 * A soak worker: one real process with its own LeaseService and pool (started by run.ts with `node --import tsx
 * --expose-gc`), churning through acquire / release / waits that time out / aborted waits / takeovers /
 * holdAtLeastMs over many keys until told to stop. Every lease does one fenced write into soak_history (with a
 * commit sequence number), so the runner can check fencing order from the database alone.
 *
 * On `sample` it answers with its memory and handle counts (after a full GC, so the numbers show what is retained).
 */
import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { DataSource } from 'typeorm';
import {
  LeaseBusyError,
  LeaseLostError,
  LeaseService,
  LeaseWaitTimeoutError,
  leaseEntities,
  type Lease,
  type LeaseModuleOptions,
} from '../../libs/lease/src/index.js';

export interface SoakWorkerConfig {
  name: string;
  url: string;
  loops: number;
  keys: number;
  hotKeys: number;
  lease: LeaseModuleOptions;
  maxLifetimeMs: number;
}

export type SoakCounts = Record<
  'granted' | 'busy' | 'timeouts' | 'aborted' | 'takeovers' | 'lost' | 'writes' | 'refused' | 'errors',
  number
>;

export type SoakWorkerMessage =
  | { t: 'ready' }
  | { t: 'sample'; rss: number; heapUsed: number; handles: number; counts: SoakCounts }
  | { t: 'done'; counts: SoakCounts };

export type SoakParentMessage = { t: 'sample' } | { t: 'stop' };

const config = JSON.parse(process.argv[2]) as SoakWorkerConfig;

// Leave without cleanup if the runner is gone or this process ran far too long (the leases expire by themselves).
const parentPid = process.ppid;
process.on('disconnect', () => process.exit(0));
setInterval(() => process.ppid !== parentPid && process.exit(0), 500).unref();
setTimeout(() => process.exit(3), config.maxLifetimeMs).unref();
Logger.overrideLogger(['error']);

const send = (message: SoakWorkerMessage) => process.connected && process.send!(message);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const random = (min: number, max: number) => min + Math.random() * (max - min);
const counts: SoakCounts = {
  granted: 0,
  busy: 0,
  timeouts: 0,
  aborted: 0,
  takeovers: 0,
  lost: 0,
  writes: 0,
  refused: 0,
  errors: 0,
};
let stopping = false;

/** Half of the picks go to a few hot keys (contention, waits, takeovers), half spread over all keys. */
function pickKey(): string {
  const n = Math.random() < 0.5 ? Math.floor(Math.random() * config.hotKeys) : Math.floor(Math.random() * config.keys);
  return `soak:${n}`;
}

async function fencedWrite(lease: Lease): Promise<void> {
  try {
    await lease.fenced((manager) =>
      manager.query(
        `INSERT INTO soak_history (target, fencing_token, worker, commit_seq)
         VALUES ($1, $2, $3, nextval('soak_commit_seq'))`,
        [lease.targetKey, lease.fencingToken.toString(), config.name],
      ),
    );
    counts.writes++;
  } catch (error) {
    if (error instanceof LeaseLostError) counts.refused++;
    else throw error;
  }
}

/** Holds a lease for a short while, writes once (fenced), releases. */
async function use(lease: Lease, workMs: number): Promise<void> {
  counts.granted++;
  try {
    await sleep(workMs);
    await fencedWrite(lease);
  } finally {
    await lease.release();
  }
}

async function step(leases: LeaseService, dataSource: DataSource): Promise<void> {
  const key = pickKey();
  const roll = Math.random();
  if (roll < 0.35) {
    // Try once; sometimes keep the target taken for a minimum time after a fast job.
    const holdAtLeastMs = Math.random() < 0.15 ? Math.round(random(20, 200)) : undefined;
    const lease = await leases.tryAcquire(key, { holdAtLeastMs });
    if (lease) await use(lease, random(0, 30));
    else counts.busy++;
  } else if (roll < 0.6) {
    // Wait in line, often giving up at waitTimeoutMs.
    const lease = await leases.acquire(key, {
      priority: Math.floor(random(0, 4)),
      onBusy: { wait: { timeoutMs: Math.round(random(20, 600)) } },
    });
    await use(lease, random(0, 30));
  } else if (roll < 0.75) {
    // Wait, and walk away at a random moment (before, during or after the enqueue).
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new Error('walked away')), random(0, 300));
    try {
      const lease = await leases.acquire(key, { onBusy: { wait: { timeoutMs: 5_000 } }, signal: controller.signal });
      await use(lease, random(0, 30));
    } catch (error) {
      if (controller.signal.aborted && error === controller.signal.reason) counts.aborted++;
      else throw error;
    } finally {
      clearTimeout(timer);
    }
  } else if (roll < 0.8) {
    // A holder that stalls: its row is aged as if its heartbeats had stopped long ago, so another worker may take
    // it over while it still works; its own heartbeat then finds it expired or taken over.
    const lease = await leases.tryAcquire(key);
    if (!lease) {
      counts.busy++;
      return;
    }
    counts.takeovers++;
    await dataSource.query(
      `UPDATE job_lease SET updated_at = updated_at - interval '1 hour' WHERE target_id = $1 AND lease_token = $2`,
      [key, lease.token],
    );
    await use(lease, random(0, 400));
  } else {
    // run(): the door the decorators use.
    await leases.run(
      key,
      async (lease) => {
        counts.granted++;
        await sleep(random(0, 20));
        await fencedWrite(lease);
      },
      { onBusy: { wait: { timeoutMs: Math.round(random(50, 400)) } } },
    );
  }
}

async function loop(leases: LeaseService, dataSource: DataSource): Promise<void> {
  while (!stopping) {
    try {
      await step(leases, dataSource);
    } catch (error) {
      if (error instanceof LeaseWaitTimeoutError) counts.timeouts++;
      else if (error instanceof LeaseBusyError) counts.busy++;
      else {
        counts.errors++;
        console.error(`${config.name}: ${String(error)}`);
        await sleep(50);
      }
    }
    await sleep(random(0, 5));
  }
}

async function main(): Promise<void> {
  const dataSource = new DataSource({
    type: 'postgres',
    url: config.url,
    entities: [...leaseEntities],
    extra: { max: 6, application_name: config.name },
  });
  await dataSource.initialize();
  const leases = new LeaseService(dataSource, { ...config.lease, owner: config.name });
  await leases.init();
  leases.events$.subscribe((event) => event.type === 'lost' && counts.lost++);
  process.on('message', (message: SoakParentMessage) => {
    if (message.t === 'stop') stopping = true;
    if (message.t === 'sample') {
      (globalThis as { gc?: () => void }).gc?.();
      const { rss, heapUsed } = process.memoryUsage();
      send({ t: 'sample', rss, heapUsed, handles: process.getActiveResourcesInfo().length, counts: { ...counts } });
    }
  });
  send({ t: 'ready' });
  await Promise.all(Array.from({ length: config.loops }, () => loop(leases, dataSource)));
  await leases.close();
  await dataSource.destroy();
  process.send!({ t: 'done', counts } satisfies SoakWorkerMessage, () => process.disconnect());
}

main().catch((error: unknown) => {
  console.error(`${config.name} failed`, error);
  process.exit(1);
});
