/**
 * A fault-suite worker: one real process with its own LeaseService and pool, started by the harness with
 * `node --import tsx` and driven over IPC. Either loops by itself (bounded in count and time) or obeys commands.
 *
 * Every fenced write appends (op id, target, fencing token, worker, nextval of a commit sequence, clock_timestamp())
 * to fault_history and does a read-modify-write of fault_counter, all in the fenced transaction. It reports every
 * outcome (ack / refused / unknown) to the parent; the checker compares those reports with the tables.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Logger } from '@nestjs/common';
import { DataSource, type EntityManager } from 'typeorm';
import {
  LeaseLostError,
  LeaseService,
  LeaseWaitTimeoutError,
  leaseEntities,
  type Lease,
} from '../../../libs/lease/src/index.js';
import { interceptHeadWakeups } from '../../../libs/lease/src/internal.js';
import { sleep } from '../../support/sleep.js';
import { historyTarget, recordWrite } from './history.js';
import type { Command, ParentMessage, WorkerConfig, WorkerMessage, WriteOutcome } from './protocol.js';

const config = JSON.parse(process.argv[2]) as WorkerConfig;

// The parent is gone, or this process ran too long: leave without cleanup (the leases expire by themselves). The
// IPC channel does not always report a dead parent (under Jest it stayed open), so the parent pid is watched too.
const parentPid = process.ppid;
process.on('disconnect', () => process.exit(0));
setInterval(() => process.ppid !== parentPid && process.exit(0), 250).unref();
setTimeout(() => process.exit(3), config.maxLifetimeMs).unref();
// Warnings and errors only (lost leases, failed heartbeats): they land in artifacts/faults/<name>.log.
Logger.overrideLogger(['error', 'warn']);

function send(message: WorkerMessage): void {
  if (process.connected) process.send!(message);
}

const proceedWaiters = new Map<string, () => void>();

async function historyWrite(manager: EntityManager, lease: Lease, opId: string, holdInside: boolean): Promise<void> {
  if (holdInside) {
    // The row lock is held from here on (fenced mode): the parent pauses this process now, then lets it go on.
    const proceed = new Promise<void>((resolve) => proceedWaiters.set(opId, resolve));
    send({ t: 'inside', opId });
    await proceed;
  }
  await recordWrite(manager, {
    opId,
    target: historyTarget(lease),
    fencingToken: lease.fencingToken,
    worker: config.name,
  });
}

async function fencedWrite(
  dataSource: DataSource,
  lease: Lease,
  opId: string,
  holdInside = false,
  release = false,
): Promise<WriteOutcome> {
  const afterLoss = lease.signal.aborted;
  let outcome: WriteOutcome;
  let error: string | undefined;
  try {
    if (config.unfenced) await dataSource.transaction((manager) => historyWrite(manager, lease, opId, holdInside));
    else await lease.fenced((manager) => historyWrite(manager, lease, opId, holdInside), { release });
    outcome = 'ack';
  } catch (caught) {
    // A refusal is certain to have written nothing; any other failure (connection killed around COMMIT) may have
    // committed or not: the checker resolves it from the history table.
    outcome = caught instanceof LeaseLostError ? 'refused' : 'unknown';
    error = String(caught);
  }
  send({
    t: 'write',
    opId,
    key: lease.targetKey,
    fencingToken: lease.fencingToken.toString(),
    outcome,
    afterLoss,
    error,
  });
  return outcome;
}

function watch(lease: Lease): void {
  send({ t: 'acquired', key: lease.targetKey, fencingToken: lease.fencingToken.toString() });
  lease.signal.addEventListener(
    'abort',
    () => {
      if (lease.signal.reason instanceof LeaseLostError) {
        send({ t: 'aborted', key: lease.targetKey, fencingToken: lease.fencingToken.toString() });
      }
    },
    { once: true },
  );
}

type LoopStats = Record<'leases' | 'busy' | 'waitTimeouts' | 'errors' | 'joins', number>;

/**
 * A joinable run (`onBusy: 'join'`): its work makes the plan's fenced writes and returns the last one (a refused
 * write fails the run: it saved nothing). A call whose own work did not run got another run's outcome: reported.
 */
async function joinableRun(
  leases: LeaseService,
  dataSource: DataSource,
  plan: NonNullable<WorkerConfig['loop']>,
  key: string,
  stats: LoopStats,
): Promise<void> {
  let ran = false;
  const outcome = await leases.run(
    key,
    async (lease) => {
      ran = true;
      stats.leases++;
      watch(lease);
      await sleep(plan.workMs * (0.5 + Math.random()), lease.signal);
      let last = '';
      for (let w = 0; w < plan.writesPerLease; w++) {
        last = randomUUID();
        if ((await fencedWrite(dataSource, lease, last)) !== 'ack') throw new Error('a write was not saved');
      }
      return { opId: last, fencingToken: lease.fencingToken.toString() };
    },
    { onBusy: { join: { timeoutMs: Math.max(plan.waitTimeoutMs, 1_000) } } },
  );
  if (!ran) {
    stats.joins++;
    send({ t: 'joined', key, ...outcome });
  }
}

async function loop(
  leases: LeaseService,
  dataSource: DataSource,
  plan: NonNullable<WorkerConfig['loop']>,
  stats: LoopStats,
  index: number,
): Promise<void> {
  const until = performance.now() + plan.durationMs;
  // `iterations` counts leases obtained, not attempts: busy and failed attempts only cost time.
  for (let leased = 0; leased < plan.iterations && performance.now() < until && !stopping;) {
    const key = plan.keys[(index + Math.floor(Math.random() * plan.keys.length)) % plan.keys.length];
    const mode = Math.random();
    try {
      if (plan.joinShare && mode < plan.joinShare) {
        leased++;
        await joinableRun(leases, dataSource, plan, key, stats);
        continue;
      }
      const preempt = plan.preempt && mode >= 1 - plan.preempt.share ? plan.preempt : undefined;
      const priority = preempt?.priorities[Math.floor(Math.random() * preempt.priorities.length)];
      const lease = preempt
        ? await leases.acquire(key, {
            priority,
            onBusy: {
              preempt: {
                graceMs: preempt.graceMs,
                waitTimeoutMs: Math.max(plan.waitTimeoutMs, preempt.graceMs + 1_000),
              },
            },
          })
        : plan.waitTimeoutMs > 0
          ? await leases.acquire(key, { onBusy: { wait: { timeoutMs: plan.waitTimeoutMs } }, limit: plan.limit })
          : await leases.tryAcquire(key, { limit: plan.limit });
      if (!lease) {
        stats.busy++;
        await sleep(5 + Math.random() * 20);
        continue;
      }
      stats.leases++;
      leased++;
      watch(lease);
      try {
        if (!preempt && plan.stubborn && Math.random() < plan.stubborn.share) await sleep(plan.stubborn.ms);
        else await sleep(plan.workMs * (0.5 + Math.random()), lease.signal);
        // Written even when the signal aborted: the fence (not the caller's diligence) must refuse it.
        for (let w = 0; w < plan.writesPerLease; w++) {
          const last = w === plan.writesPerLease - 1;
          await fencedWrite(
            dataSource,
            lease,
            randomUUID(),
            false,
            last && !!plan.releaseWithLastSave && leased % 2 === 0,
          );
        }
      } finally {
        await lease.release();
      }
    } catch (error) {
      if (error instanceof LeaseWaitTimeoutError) stats.waitTimeouts++;
      else {
        // Database errors (killed backends, restarts) are expected under faults: back off and go on.
        stats.errors++;
        await sleep(20 + Math.random() * 50);
      }
    }
  }
}

let stopping = false;

/** One term of a leader (elect mode): fenced writes until the lease's signal aborts, then one more. */
async function lead(dataSource: DataSource, lease: Lease, everyMs: number): Promise<void> {
  watch(lease);
  while (!stopping) {
    const lost = lease.signal.aborted;
    await fencedWrite(dataSource, lease, randomUUID());
    if (lost) return;
    await sleep(everyMs);
  }
}

async function main(): Promise<void> {
  const dataSource = new DataSource({
    type: 'postgres',
    url: config.url,
    entities: [...leaseEntities],
    extra: {
      max: config.poolSize,
      application_name: config.name,
      // The unfenced control's writes run in the application's own transactions: bounded while idle like the fenced
      // ones (whose sessions the library bounds), so a leader paused between its counter's UPDATE and COMMIT does not
      // hold that row lock, and the next leader's first write behind it, until it is let go again.
      ...(config.unfenced ? { idle_in_transaction_session_timeout: config.lease.timing?.leaseTimeoutMs ?? 2_000 } : {}),
    },
  });
  await dataSource.initialize();
  const leases = new LeaseService(dataSource, config.lease);
  await leases.init();
  leases.events$.subscribe((event) => {
    if (event.type === 'lost') {
      send({ t: 'lost', key: event.targetKey, fencingToken: event.fencingToken.toString(), reason: event.reason });
    }
    if (event.type === 'preempted') {
      send({
        t: 'preempted',
        key: event.targetKey,
        fencingToken: event.fencingToken.toString(),
        previousFencingToken: event.previousFencingToken.toString(),
        forced: event.forced,
      });
    }
  });
  const held = new Map<string, Lease>();
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => (finish = resolve));

  const run = async (command: Command): Promise<unknown> => {
    switch (command.op) {
      case 'acquire': {
        if (command.dieOnGrant) {
          interceptHeadWakeups(leases, (wakeup) => {
            if (wakeup.grant === undefined) return wakeup.deliver();
            // Killed once the report is out: between the grant's commit and its confirmation, exactly.
            process.send!({ t: 'grant-heard', fencingToken: wakeup.grant.toString() }, () =>
              process.kill(process.pid, 'SIGKILL'),
            );
          });
        }
        const lease = command.waitTimeoutMs
          ? await leases.acquire(command.key, { onBusy: { wait: { timeoutMs: command.waitTimeoutMs } } })
          : await leases.tryAcquire(command.key);
        if (!lease) return null;
        held.set(command.key, lease);
        watch(lease);
        return lease.fencingToken.toString();
      }
      case 'write':
        return fencedWrite(dataSource, held.get(command.key)!, command.opId, command.holdInside);
      case 'release':
        await held.get(command.key)?.release();
        held.delete(command.key);
        return true;
      case 'exit':
        finish();
        return true;
    }
  };

  process.on('message', (message: ParentMessage) => {
    if (message.t === 'stop') stopping = true;
    else if (message.t === 'proceed') proceedWaiters.get(message.opId)?.();
    else {
      run(message.cmd).then(
        (value) => send({ t: 'reply', id: message.id, ok: true, value }),
        (error: unknown) =>
          send({ t: 'reply', id: message.id, ok: false, error: `${(error as Error)?.name}: ${String(error)}` }),
      );
    }
  });
  send({ t: 'ready' });

  const stats = { leases: 0, busy: 0, waitTimeouts: 0, errors: 0, joins: 0 };
  if (config.elect) {
    const { key, priority, writeEveryMs } = config.elect;
    const leadership = leases.elect(key, {
      priority,
      onElected: (lease) => void lead(dataSource, lease, writeEveryMs),
    });
    await finished;
    await leadership.stop();
  } else if (config.loop) {
    const plan = config.loop;
    await Promise.all(Array.from({ length: plan.loops }, (_, index) => loop(leases, dataSource, plan, stats, index)));
  } else {
    await finished;
  }
  await leases.close();
  await dataSource.destroy().catch(() => undefined);
  // Leave only once the last report is on its way.
  process.send!({ t: 'done', ...stats } satisfies WorkerMessage, () => process.disconnect());
}

main().catch((error: unknown) => {
  console.error('worker failed', error);
  process.exit(1);
});
