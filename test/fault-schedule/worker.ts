/**
 * A workload process of the fault schedule, run by the runner with `node --import tsx` (through the fault suite's
 * `Worker`). A Nest application with `LeaseModule` (its LeaseService is the one every call uses) and a controller
 * with `@Exclusive` routes, served on a loopback port; `loops` concurrent loops draw calls from a seeded PRNG, all
 * through the public API:
 *
 * - `tryAcquire` of a hot or a bulk key; `acquire` with a priority and a wait timeout; `acquire` aborted by a signal;
 * - `run` (refusing, or waiting with a priority), its work making fenced writes;
 * - `POST /x/:key` (`@Exclusive`, refusing) and `POST /w1/:key`, `/w3/:key` (`@Exclusive` waiting at priority 1 and
 *   3) over HTTP to this process's own server;
 * - a batch: many `tryAcquire` of distinct bulk keys (and one duplicate) in one turn, then their releases in one turn;
 * - a long holder: many bulk leases held for seconds (several heartbeats), then a fenced write on each;
 * - the modes where two features meet (`worker-modes.ts`): joins (`run` and `POST /j/:key` with `onBusy: 'join'`)
 *   beside plain runs with a hold's tail on the join keys, and a sticky job ticking faster than its work.
 *
 * Every lease's work ends in fenced writes (`fault_history`, as the fault suite's workers write it), also when its
 * signal aborted: the fence, not the caller's diligence, must refuse them. Reports every grant, loss, release, write
 * outcome, call outcome and wait (with its bound and duration) to the runner; aimed steps stop a call at a named
 * phase (`hit`) until the runner says `go`. `close` calls `LeaseService.close()` while the loops are mid-call.
 */
import 'reflect-metadata';
import './pg-error-origins.js';
import { randomUUID } from 'node:crypto';
import { Controller, HttpCode, type INestApplication, Module, Param, Post, Query } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import {
  CurrentLease,
  Exclusive,
  LeaseModule,
  LeaseService,
  leaseEntities,
  type Lease,
} from '../../libs/lease/src/index.js';
import { sleep } from '../support/sleep.js';
import type { OpKind, ScheduleMessage, ScheduleParentMessage } from './protocol.js';
import { deriveSeed, Random } from './schedule.js';
import {
  armed,
  attach,
  closeWarnings,
  closing,
  config,
  dataSource,
  fencedWrite,
  goes,
  heldUntil,
  leases,
  logger,
  op,
  outcomeOf,
  phase,
  release,
  send,
  stalledMs,
  startClosing,
  wall,
  work,
} from './worker-kit.js';
import { holdRun, join, JoinController, startSticky, StickyJob } from './worker-modes.js';
import { multiRun } from './worker-multi.js';
import { lengthRun } from './worker-length.js';
import { readWriteRun } from './worker-read-write.js';

/** How often each call is drawn. */
const CALL_MIX: Readonly<Record<Exclude<OpKind, 'release' | 'sticky'>, number>> = {
  tryAcquire: 22,
  acquire: 22,
  'acquire-abort': 7,
  run: 8,
  'run-wait': 8,
  http: 8,
  'http-wait': 10,
  batch: 8,
  long: 3,
  join: 8,
  'http-join': 3,
  'run-hold': 5,
  // Its negative control draws them more often: two sets sharing a key then meet within seconds.
  multi: config.multiSkipLast ? 40 : 6,
  // The same for read-write calls: a reader then meets a writer within seconds.
  rw: config.readerBesideWriter ? 40 : 6,
  // A lease length per call; its control draws them more often too (each renewal beside another lease shows it). The
  // token-before-lock control draws none: their holds keep hot keys from the grant-and-release cycles it needs.
  length: config.renewOneLength ? 40 : config.tokenBeforeLock ? 0 : 8,
};

/**
 * A key no lease has had yet, the same for every process during a window of 1.5 s (3 of them per window): processes
 * race to create its row (the insert path, where batches wait on another process's uncommitted insert). Its counter
 * row for the history is made first, outside any lease.
 */
const countersMade = new Set<string>();
async function freshKey(random: Random): Promise<string> {
  const key = `f${Math.floor(wall() / 1_500)}.${random.int(0, 2)}`;
  if (!countersMade.has(key)) {
    await dataSource.query('INSERT INTO fault_counter (target, n) VALUES ($1, 0) ON CONFLICT DO NOTHING', [key]);
    countersMade.add(key);
  }
  return key;
}

class Loop {
  private readonly random: Random;

  constructor(
    private readonly index: number,
    private readonly longHolder: { busy: boolean },
  ) {
    this.random = new Random(deriveSeed(config.seed, index));
  }

  private hotKey(): string {
    return this.random.pick(config.hotKeys);
  }

  /** Mostly hot keys; some bulk keys; some keys never acquired before (see `freshKey`). */
  private async anyKey(): Promise<string> {
    const pick = this.random.next();
    if (pick < 0.65) return this.hotKey();
    if (pick < 0.9) return this.random.pick(config.bulkKeys);
    return freshKey(this.random);
  }

  private bulkKeys(count: number): string[] {
    const keys = new Set<string>();
    while (keys.size < count) keys.add(this.random.pick(config.bulkKeys));
    return [...keys];
  }

  async loop(): Promise<void> {
    const calls: Record<Exclude<OpKind, 'release' | 'sticky'>, () => Promise<void>> = {
      tryAcquire: () => this.tryAcquire(),
      acquire: () => this.waitInLine('acquire'),
      'acquire-abort': () => this.waitInLine('acquire-abort', this.random.int(30, 1_500)),
      run: () => this.run(false),
      'run-wait': () => this.run(true),
      http: () => this.http('x'),
      'http-wait': () => this.http(this.random.chance(0.5) ? 'w1' : 'w3'),
      batch: () => this.batch(),
      long: () => this.long(),
      join: () => join(this.random, 'run', baseUrl),
      'http-join': () => join(this.random, 'http', baseUrl),
      'run-hold': () => holdRun(this.random),
      multi: () => multiRun(this.random),
      rw: () => readWriteRun(this.random),
      length: () => lengthRun(this.random),
    };
    while (!closing) {
      const kind = this.random.weighted(CALL_MIX);
      try {
        await calls[kind]();
      } catch (error) {
        // Database errors (killed backends, a restart, a proxy fault) are expected under faults: back off, go on.
        op(kind, 'error', { error });
        await sleep(20 + this.random.int(0, 60));
      }
      await sleep(this.random.int(0, 25));
    }
  }

  private async tryAcquire(): Promise<void> {
    const lease = await leases.tryAcquire(await this.anyKey());
    op('tryAcquire', lease ? 'granted' : 'busy');
    if (!lease) return sleep(this.random.int(5, 30));
    try {
      await work(lease, this.random);
    } finally {
      await release(lease);
    }
  }

  /** Waits in line; `abortAfterMs`: an AbortSignal ends the wait then (if it is still waiting). */
  private async waitInLine(kind: 'acquire' | 'acquire-abort', abortAfterMs?: number): Promise<void> {
    const key = this.hotKey();
    const priority = this.random.int(0, 3);
    const waitTimeoutMs = abortAfterMs === undefined ? this.random.int(200, 2_500) : 3_000;
    const controller = new AbortController();
    const abort = abortAfterMs === undefined ? undefined : setTimeout(() => controller.abort(), abortAfterMs);
    const startedAt = wall();
    const stalledFrom = stalledMs;
    const boundMs = Math.min(waitTimeoutMs, abortAfterMs ?? Infinity);
    let lease: Lease;
    try {
      lease = await leases.acquire(key, {
        priority,
        onBusy: { wait: { timeoutMs: waitTimeoutMs } },
        signal: controller.signal,
      });
    } catch (error) {
      op(kind, outcomeOf(error), {
        wait: { key, priority, boundMs, startedAt, endedAt: wall(), stalledMs: stalledMs - stalledFrom },
        error,
      });
      return;
    } finally {
      clearTimeout(abort);
    }
    op(kind, 'granted', {
      wait: { key, priority, boundMs, startedAt, endedAt: wall(), stalledMs: stalledMs - stalledFrom },
    });
    try {
      await work(lease, this.random);
    } finally {
      await release(lease);
    }
  }

  private async run(waiting: boolean): Promise<void> {
    const key = this.hotKey();
    const priority = this.random.int(0, 3);
    const waitTimeoutMs = this.random.int(300, 2_000);
    const startedAt = wall();
    const stalledFrom = stalledMs;
    let grantedAt: number | undefined;
    let stalledAtGrant = 0;
    const kind: OpKind = waiting ? 'run-wait' : 'run';
    try {
      await leases.run(
        key,
        async (lease) => {
          grantedAt = wall();
          stalledAtGrant = stalledMs;
          await work(lease, this.random);
        },
        waiting ? { priority, onBusy: { wait: { timeoutMs: waitTimeoutMs } } } : {},
      );
      op(
        kind,
        'granted',
        waiting
          ? {
              wait: {
                key,
                priority,
                boundMs: waitTimeoutMs,
                startedAt,
                endedAt: grantedAt!,
                stalledMs: stalledAtGrant - stalledFrom,
              },
            }
          : {},
      );
    } catch (error) {
      const wait =
        waiting && grantedAt === undefined
          ? { key, priority, boundMs: waitTimeoutMs, startedAt, endedAt: wall(), stalledMs: stalledMs - stalledFrom }
          : undefined;
      op(kind, grantedAt === undefined ? outcomeOf(error) : 'work-failed', { wait, error });
    }
  }

  private async http(route: 'x' | 'w1' | 'w3'): Promise<void> {
    const key = await this.anyKey();
    const id = randomUUID();
    const startedAt = wall();
    const stalledFrom = stalledMs;
    const response = await fetch(`${baseUrl}/${route}/${encodeURIComponent(key)}?op=${id}`, {
      method: 'POST',
      signal: AbortSignal.timeout(20_000),
    });
    await response.arrayBuffer();
    const granted = httpGrants.get(id);
    httpGrants.delete(id);
    if (route === 'x') return op('http', String(response.status));
    const priority = route === 'w1' ? 1 : 3;
    const endedAt = granted?.at ?? wall();
    const stalled = (granted?.stalledMs ?? stalledMs) - stalledFrom;
    op('http-wait', String(response.status), {
      wait: { key, priority, boundMs: HTTP_WAIT_MS, startedAt, endedAt, stalledMs: stalled },
    });
  }

  /** Many acquisitions in one turn of the event loop (they go in group-commit batches), then their releases. */
  private async batch(): Promise<void> {
    const keys = this.bulkKeys(this.random.int(3, 12));
    keys.push(keys[0]); // a duplicate inside the batch: exactly one of the two may win
    if (this.random.chance(0.5)) keys.push(await freshKey(this.random)); // a new row, maybe raced by another process
    await phase('batch');
    const results = await Promise.allSettled(keys.map((key) => leases.tryAcquire(key)));
    const granted = results.flatMap((r) => (r.status === 'fulfilled' && r.value ? [r.value] : []));
    const failed = results.find((r) => r.status === 'rejected');
    op('batch', failed ? 'error' : `${granted.length}/${keys.length}`, { calls: keys.length, error: failed?.reason });
    try {
      await Promise.all(granted.map((lease) => fencedWrite(lease)));
    } finally {
      if (granted.length) await phase('releasing', granted[0]);
      await Promise.all(granted.map((lease) => lease.release()));
      if (granted.length) op('release', 'ok', { calls: granted.length });
    }
  }

  /** A long holder: many bulk leases held over several heartbeats, then a fenced write on each (one at a time). */
  private async long(): Promise<void> {
    if (this.longHolder.busy) return this.tryAcquire();
    this.longHolder.busy = true;
    const held: Lease[] = [];
    try {
      const keys = this.bulkKeys(this.random.int(8, 24));
      const results = await Promise.allSettled(keys.map((key) => leases.tryAcquire(key)));
      for (const r of results) if (r.status === 'fulfilled' && r.value) held.push(r.value);
      op('long', `${held.length}/${keys.length}`, { calls: keys.length });
      if (held.length) await phase('long-holding', held[0]);
      await sleep(this.random.int(800, 4_000));
      for (const lease of held) await fencedWrite(lease);
    } finally {
      await Promise.all(held.map((lease) => lease.release()));
      if (held.length) op('release', 'ok', { calls: held.length });
      this.longHolder.busy = false;
    }
  }
}

// --- the HTTP doors -------------------------------------------------------------------------------------------------

const HTTP_WAIT_MS = 1_500;
let baseUrl = '';
/** Request id → when its handler got the lease (so a waiting request's wait ends there, not after its work). */
const httpGrants = new Map<string, { at: number; stalledMs: number }>();
const httpRandom = new Random(deriveSeed(config.seed, 0x417));

async function handle(lease: Lease, id: string): Promise<{ fencingToken: string }> {
  httpGrants.set(id, { at: wall(), stalledMs });
  await work(lease, httpRandom);
  return { fencingToken: lease.fencingToken.toString() };
}

@Controller()
class ScheduleController {
  @Post('x/:key')
  @HttpCode(200)
  @Exclusive('{key}')
  plain(@Param('key') key: string, @Query('op') id: string, @CurrentLease() lease: Lease) {
    return handle(lease, id);
  }

  @Post('w1/:key')
  @HttpCode(200)
  @Exclusive('{key}', { priority: 1, onBusy: { wait: { timeoutMs: HTTP_WAIT_MS } } })
  low(@Param('key') key: string, @Query('op') id: string, @CurrentLease() lease: Lease) {
    return handle(lease, id);
  }

  @Post('w3/:key')
  @HttpCode(200)
  @Exclusive('{key}', { priority: 3, onBusy: { wait: { timeoutMs: HTTP_WAIT_MS } } })
  high(@Param('key') key: string, @Query('op') id: string, @CurrentLease() lease: Lease) {
    return handle(lease, id);
  }
}

// --- the process ----------------------------------------------------------------------------------------------------

async function start(): Promise<INestApplication> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: config.url,
        entities: [...leaseEntities],
        extra: { max: config.poolSize, application_name: config.name },
      }),
      LeaseModule.forRoot({ ...config.lease, owner: config.name }),
    ],
    controllers: [ScheduleController, JoinController],
    providers: [StickyJob],
  })
  class ScheduleWorkerModule {}
  const app = await NestFactory.create(ScheduleWorkerModule, { logger, abortOnError: false });
  await app.listen(0, '127.0.0.1');
  return app;
}

async function main(): Promise<void> {
  const app = await start();
  baseUrl = `http://127.0.0.1:${(app.getHttpServer().address() as { port: number }).port}`;
  attach(app.get(LeaseService), app.get(DataSource));
  leases.events$.subscribe((event) => {
    switch (event.type) {
      case 'acquired':
      case 'taken-over':
        send({
          t: 'grant',
          key: event.targetKey,
          fencingToken: event.fencingToken.toString(),
          owner: event.owner,
          at: wall(),
        });
        return;
      case 'lost':
        send({ t: 'lost', key: event.targetKey, fencingToken: event.fencingToken.toString(), reason: event.reason });
        heldUntil(event.targetKey, event.fencingToken.toString());
        return;
      case 'released':
        send({ t: 'released', key: event.targetKey, fencingToken: event.fencingToken.toString() });
        heldUntil(event.targetKey, event.fencingToken.toString());
        return;
      case 'waiting':
        void phase('waiting', undefined, false);
        return;
    }
  });

  const longHolder = { busy: false };
  const loops = Array.from({ length: config.loops }, (_, index) => new Loop(index, longHolder).loop());
  const ticking = startSticky(app.get(StickyJob));
  let exit!: () => void;
  const exiting = new Promise<void>((resolve) => (exit = resolve));

  const close = async () => {
    if (closing) return;
    startClosing();
    const startedAt = wall();
    // While the loops are mid-call: acquisitions, waits, fenced writes and releases in flight race the shutdown.
    await leases.close();
    send({
      t: 'closed',
      held: leases.heldLeases().length,
      waiting: leases.waitingCount(),
      closeMs: wall() - startedAt,
      warnings: closeWarnings.splice(0),
    });
  };

  process.on('message', (message: ScheduleParentMessage | { t: 'stop' } | { t: 'cmd' }) => {
    switch (message.t) {
      case 'arm':
        armed.set(message.phase, message.step);
        return;
      case 'disarm':
        for (const [name, step] of armed) if (step === message.step) armed.delete(name);
        return;
      case 'go':
        goes.get(message.step)?.();
        return;
      case 'close':
        void close();
        return;
      // 'stop' and 'cmd' (exit) are what the fault suite's Worker.end() sends.
      case 'exit':
      case 'stop':
      case 'cmd':
        void close().then(exit);
        return;
    }
  });
  send({ t: 'ready' });

  await exiting;
  for (const resolve of goes.values()) resolve();
  await Promise.allSettled([...loops, ticking]);
  await app.close();
  process.send!({ t: 'done' } satisfies ScheduleMessage, () => process.disconnect());
}

main().catch((error: unknown) => {
  console.error('worker failed', error);
  process.exit(1);
});
