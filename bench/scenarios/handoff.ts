/**
 * One hot key, 8 clients that each take it, release it at once and queue again: handoffs per second and the
 * latency from the holder's release call to the next holder's grant. nest-pg-lease clients are 8 services (8
 * "processes": own pool, own LISTEN connection) waiting in the priority line; a release's NOTIFY names the next
 * waiter only (head-only handoff), so the others stay asleep. The baselines
 * are blocking `pg_advisory_lock` (the lock manager's own queue) and @verrou/core, which polls (default 250 ms).
 */
import type { Lock } from '@verrou/core';
import { advisory, openAdvisory, openLeases, openVerrou, type OpenLeases } from '../support/contenders.js';
import {
  interleaved,
  summarize,
  type BenchContext,
  type Contender,
  type Row,
  type RunResult,
  type Workload,
} from '../support/measure.js';
import { LEASE_IMPLEMENTATIONS } from './acquire-release.js';

export const CLIENTS = 8;
export const HANDOFF_SCENARIO = `handoff, 1 hot key, ${CLIENTS} clients`;
export const VERROU_HANDOFF = '@verrou/core (knex store, 250 ms retry)';

/**
 * `CLIENTS` loops of acquire → release until `durationMs` is over; samples release call → next grant. A client that
 * released waits until another client holds the key before it queues again: every grant is then a handoff to a
 * client that was already waiting (otherwise a library without fairness would mostly hand the key back to the
 * releaser, and that is not a handoff).
 */
function signal(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}

async function handoffs(
  durationMs: number,
  take: (client: number) => Promise<() => Promise<void>>,
): Promise<RunResult> {
  const latenciesMs: number[] = [];
  let releasedAt: number | undefined;
  let nextGrant = signal();
  const started = performance.now();
  const deadline = started + durationMs;
  let timer: NodeJS.Timeout | undefined;
  const over = new Promise<void>((resolve) => (timer = setTimeout(resolve, durationMs)));
  await Promise.all(
    Array.from({ length: CLIENTS }, async (_, client) => {
      while (performance.now() < deadline) {
        const release = await take(client);
        if (releasedAt !== undefined) latenciesMs.push(performance.now() - releasedAt);
        const granted = nextGrant;
        nextGrant = signal();
        granted.resolve();
        const handedOn = nextGrant.promise;
        releasedAt = performance.now();
        await release();
        await Promise.race([handedOn, over]);
      }
    }),
  );
  clearTimeout(timer);
  return { ops: latenciesMs.length, elapsedMs: performance.now() - started, latenciesMs };
}

export async function handoff(ctx: BenchContext): Promise<Row[]> {
  const durationMs = ctx.quick ? 2_000 : 4_000;
  const rounds = ctx.quick ? 2 : 3;
  ctx.log(`  ${HANDOFF_SCENARIO}: ${rounds} rounds × ${durationMs / 1000} s`);
  const url = ctx.db.url;

  const lease: Contender = {
    name: LEASE_IMPLEMENTATIONS.shipped,
    workload: (round): Workload => {
      const open: OpenLeases[] = [];
      const key = `hot:${round}`;
      const take = async (client: number) => {
        const held = await open[client].service.acquire(key, { onBusy: { wait: { timeoutMs: 30_000 } } });
        return () => held.release();
      };
      return {
        setup: async () => {
          for (let client = 0; client < CLIENTS; client++) {
            open.push(await openLeases(url, 2, { timing: { heartbeatIntervalMs: 1_000, leaseTimeoutMs: 10_000 } }));
          }
          // Prepares each service's statements and its LISTEN connection (a wait opens it).
          for (let client = 0; client < CLIENTS; client++) await (await take(client))();
          return CLIENTS;
        },
        run: () => handoffs(durationMs, take),
        teardown: async () => {
          await Promise.all(open.map((one) => one.close()));
        },
      };
    },
  };

  const blockingAdvisory: Contender = {
    name: 'advisory lock (blocking pg_advisory_lock)',
    workload: (round): Workload => {
      let open: Awaited<ReturnType<typeof openAdvisory>> | undefined;
      const take = async (client: number) => {
        const session = open!.sessions[client];
        await advisory.lock(session, 1_000 + round);
        return async () => void (await advisory.unlock(session, 1_000 + round));
      };
      return {
        setup: async () => {
          open = await openAdvisory(url, CLIENTS);
          for (let client = 0; client < CLIENTS; client++) await (await take(client))();
          return 0;
        },
        run: () => handoffs(durationMs, take),
        teardown: async () => open?.close(),
      };
    },
  };

  const verrou: Contender = {
    name: VERROU_HANDOFF,
    workload: (round): Workload => {
      const open = openVerrou(url, CLIENTS);
      const take = async () => {
        const lock: Lock = open.verrou.createLock(`hot:${round}`, 30_000);
        if (!(await lock.acquire())) throw new Error('verrou gave up waiting');
        return () => lock.release();
      };
      return {
        setup: async () => {
          for (let client = 0; client < CLIENTS; client++) await (await take())();
          return CLIENTS;
        },
        run: () => handoffs(durationMs, take),
        teardown: () => open.close(),
      };
    },
  };

  const contenders = [lease, blockingAdvisory, verrou];
  const results = await interleaved(ctx.db, rounds, contenders, ctx.log);
  return contenders.map((contender) =>
    summarize(HANDOFF_SCENARIO, contender.name, 'handoff', results.get(contender.name)!),
  );
}
