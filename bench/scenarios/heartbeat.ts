/**
 * One process holding 1,000 and 10,000 leases: what keeping them alive costs per tick. The library renews all of
 * them with one statement per tick; @verrou/core has no renewal of its own, so its baseline is `lock.extend()` per
 * lock (what a user would have to write), 10 at a time on its pool. Advisory locks need no renewal but pin one
 * session per holder and a lock-table slot per lock.
 */
import type { Lock } from '@verrou/core';
import { filter } from 'rxjs';
import { forEachConcurrently, openLeases, openVerrou, type LeaseVariant } from '../support/contenders.js';
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
import { DRAIN_REFRESH_MS } from '../../libs/lease/src/internal.js';

/**
 * The heartbeat interval, which is also each renewal's bound (statement_timeout). A failed tick (a renewal past its
 * bound) is retried by the next one: they are counted (`failedTicks`).
 */
const HEARTBEAT_INTERVAL_MS = 500;
const SETUP_CONCURRENCY = 16;
const VERROU_POOL = 10;

export async function heartbeats(ctx: BenchContext): Promise<Row[]> {
  const rows: Row[] = [];
  const ticks = ctx.quick ? 3 : 8;
  const rounds = ctx.quick ? 1 : 2;
  for (const leases of [1_000, 10_000]) {
    const scenario = `heartbeat, ${leases.toLocaleString('en-US')} leases`;
    ctx.log(`  ${scenario}: ${rounds} round(s) × ${ticks} ticks`);
    const contenders = [
      leaseHeartbeat(ctx, leases, ticks, 'shipped'),
      leaseHeartbeat(ctx, leases, ticks, 'fillfactor-80'),
    ];
    // 10,000 extend() calls take seconds per pass: one pass is enough to see it (and quick mode skips it).
    if (!ctx.quick || leases <= 1_000)
      contenders.push(verrouExtend(ctx, leases, leases > 1_000 ? 1 : ctx.quick ? 2 : 3));
    const results = await interleaved(ctx.db, rounds, contenders, ctx.log);
    for (const contender of contenders) {
      rows.push(
        summarize(
          scenario,
          contender.name,
          `tick (${leases.toLocaleString('en-US')} leases)`,
          results.get(contender.name)!,
          { paced: true, noDeadTuples: true },
        ),
      );
    }
  }
  return rows;
}

function leaseHeartbeat(ctx: BenchContext, leases: number, ticks: number, variant: LeaseVariant): Contender {
  return {
    name: LEASE_IMPLEMENTATIONS[variant],
    workload: (round): Workload => {
      let open: Awaited<ReturnType<typeof openLeases>> | undefined;
      /** Latency and size of each tick, in order; a tick's events share one `at`. */
      const tickLog: Array<{ at: Date; latencyMs: number; renewed: number }> = [];
      /** Ticks whose renewal failed (a statement past its bound, heartbeatIntervalMs): retried by the next tick. */
      let failedTicks = 0;
      let onTick: (() => void) | undefined;
      const nextTicks = (count: number) => {
        const target = tickLog.length + count;
        return new Promise<void>((resolve) => {
          onTick = () => {
            if (tickLog.length >= target) resolve();
          };
        });
      };
      return {
        setup: async () => {
          open = await openLeases(
            ctx.db.url,
            SETUP_CONCURRENCY,
            { timing: { heartbeatIntervalMs: HEARTBEAT_INTERVAL_MS, leaseTimeoutMs: 60_000 } },
            variant,
          );
          open.service.events$.pipe(filter((event) => event.type === 'renew-failed')).subscribe(() => failedTicks++);
          open.service.events$.pipe(filter((event) => event.type === 'renewed')).subscribe((event) => {
            const last = tickLog.at(-1);
            if (last?.at === event.at) last.renewed++;
            else tickLog.push({ at: event.at, latencyMs: event.latencyMs, renewed: 1 });
            // The tick's events are emitted in one synchronous loop: the tick is complete once the loop is over.
            queueMicrotask(() => onTick?.());
          });
          await forEachConcurrently(leases, SETUP_CONCURRENCY, async (i) => {
            if (!(await open!.service.tryAcquire(`hb:${round}:${i}`)))
              throw new Error('uncontended tryAcquire returned null');
          });
          // Start the measured window right after a tick has completed, so it holds whole ticks only, and once the
          // acquisitions above no longer keep the drain view current (a process that attempts nothing reads no drains;
          // the last read comes within a refresh period of the last attempt): the steady state of holding leases.
          await nextTicks(1 + Math.ceil((2 * DRAIN_REFRESH_MS) / HEARTBEAT_INTERVAL_MS));
          return leases;
        },
        run: async (): Promise<RunResult> => {
          const first = tickLog.length;
          const failedBefore = failedTicks;
          const started = performance.now();
          await nextTicks(ticks);
          const window = tickLog.slice(first, first + ticks);
          const incomplete = window.filter((tick) => tick.renewed !== leases).length;
          if (incomplete > 0) throw new Error(`${incomplete} tick(s) did not renew all ${leases} leases`);
          return {
            ops: window.length,
            elapsedMs: performance.now() - started,
            latenciesMs: window.map((tick) => tick.latencyMs),
            extra: { leasesPerTick: leases, failedTicks: failedTicks - failedBefore },
          };
        },
        teardown: async () => open?.close(),
      };
    },
  };
}

function verrouExtend(ctx: BenchContext, leases: number, passes: number): Contender {
  return {
    name: '@verrou/core (extend() per lock)',
    workload: (round): Workload => {
      const open = openVerrou(ctx.db.url, VERROU_POOL);
      const locks: Lock[] = [];
      return {
        setup: async () => {
          for (let i = 0; i < leases; i++) locks.push(open.verrou.createLock(`hb:${round}:${i}`, 60_000));
          await forEachConcurrently(leases, VERROU_POOL, async (i) => {
            if (!(await locks[i].acquireImmediately())) throw new Error('uncontended verrou lock refused');
          });
          return leases;
        },
        run: async (): Promise<RunResult> => {
          const latenciesMs: number[] = [];
          const started = performance.now();
          for (let pass = 0; pass < passes; pass++) {
            const t0 = performance.now();
            await forEachConcurrently(leases, VERROU_POOL, (i) => locks[i].extend());
            latenciesMs.push(performance.now() - t0);
          }
          return { ops: passes, elapsedMs: performance.now() - started, latenciesMs, extra: { leasesPerTick: leases } };
        },
        teardown: async () => {
          await open.close();
          await ctx.db.query(`DELETE FROM verrou WHERE key LIKE 'hb:%'`);
        },
      };
    },
  };
}
