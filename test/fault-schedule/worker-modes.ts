/**
 * The modes where two features meet (issue 38), in a workload process of the fault schedule (`worker.ts`):
 *
 * - a sticky job, `@Sticky(STICKY_KEY, { onBusy: 'skip' })`, called by a timer every
 *   STICKY_PERIOD_MS while its work takes up to STICKY_WORK_MS: ticks overlap, and the owner must run one call at a
 *   time (the others skipped). Each call that ran reports its start and end (`sticky`) and makes a fenced write of the
 *   term's lease; the other processes are busy while the owner lives;
 * - joins, `run(key, work, { onBusy: 'join' })` (half of them with a hold's tail of their own) and `POST /j/:key`
 *   (`@Exclusive` with `onBusy: 'join'`), on the join keys: the work returns its lease's fencing token, so a join
 *   reports the token of the run whose outcome it settled with (`join`), or that it ran the work itself;
 * - plain runs with a hold's tail (`holdAtLeastMs`) on the same keys: the tails the joins meet.
 */
import { randomUUID } from 'node:crypto';
import { Controller, HttpCode, Inject, Injectable, Param, Post, Query } from '@nestjs/common';
import {
  CurrentLease,
  Exclusive,
  LeaseJoinedRunError,
  LeaseService,
  Sticky,
  type Lease,
} from '../../libs/lease/src/index.js';
import { sleep } from '../support/sleep.js';
import type { JoinRecord, WaitRecord } from './protocol.js';
import { deriveSeed, Random, STICKY_KEY } from './schedule.js';
import {
  closing,
  config,
  fencedWrite,
  leases,
  op,
  outcomeOf,
  phase,
  send,
  stalledMs,
  wall,
  work,
} from './worker-kit.js';

/** The timer's period, and the longest call: most calls outlast a period or two. */
const STICKY_PERIOD_MS = 120;
const STICKY_WORK_MS = 400;

@Injectable()
export class StickyJob {
  private readonly random = new Random(deriveSeed(config.seed, 0x571c));

  constructor(@Inject(LeaseService) private readonly leases: LeaseService) {}

  /** True when the call ran; undefined when it was skipped (`onBusy: 'skip'`: not the owner, or a call running). */
  @Sticky(STICKY_KEY, { onBusy: 'skip' })
  async tick(nested = false): Promise<boolean> {
    const startedAt = wall();
    const lease = this.leases.current()!;
    // The negative control: the next call started from inside this one's call chain — a nested call of the key to
    // the library, which lends it the term's lease: it runs beside this one.
    if (config.stickyOverlap && !nested) {
      setTimeout(() => void this.tick(true).catch(() => undefined), STICKY_PERIOD_MS / 2);
    }
    try {
      await phase('sticky', lease);
      await sleep(this.random.int(20, STICKY_WORK_MS), lease.signal);
      await fencedWrite(lease);
    } finally {
      const fencingToken = lease.fencingToken.toString();
      send({ t: 'sticky', key: STICKY_KEY, fencingToken, startedAt, endedAt: wall() });
    }
    return true;
  }
}

/** Calls the sticky job every STICKY_PERIOD_MS until close() begins, from outside any call chain. */
export async function startSticky(job: StickyJob): Promise<void> {
  while (!closing) {
    job.tick().then(
      (ran) => op('sticky', ran ? 'ran' : 'skipped'),
      (error: unknown) => op('sticky', outcomeOf(error), { error }),
    );
    await sleep(STICKY_PERIOD_MS);
  }
}

/** A plain run with a hold's tail on a join key: the key stays taken after it, with no run to join. */
export async function holdRun(random: Random): Promise<void> {
  const key = random.pick(config.joinKeys);
  let ran = false;
  try {
    await leases.run(
      key,
      async (lease) => {
        ran = true;
        await work(lease, random);
      },
      { holdAtLeastMs: random.int(200, 1_500) },
    );
    op('run-hold', 'granted');
  } catch (error) {
    op('run-hold', ran ? 'work-failed' : outcomeOf(error), { error });
  }
}

type Settled = Pick<JoinRecord, 'outcome' | 'fencingToken'> & {
  /** When it stopped waiting: its own grant, or its settling. */
  waitedUntil?: { at: number; stalledMs: number };
  error?: unknown;
};

const HTTP_JOIN_MS = 1_500;

/**
 * A join on a join key, by `run` or over HTTP: reports how it settled and with which run's fencing token (`join`),
 * and its wait against its bound (`joinTimeoutMs`), like any call that waits.
 */
export async function join(random: Random, via: JoinRecord['via'], baseUrl: string): Promise<void> {
  const key = random.pick(config.joinKeys);
  const boundMs = via === 'run' ? random.int(300, 2_500) : HTTP_JOIN_MS;
  const startedAt = Date.now();
  const waitFrom = wall();
  const stalledFrom = stalledMs;
  const settled = via === 'run' ? await joinByRun(key, boundMs, random) : await joinByHttp(key, baseUrl);
  const endedAt = Date.now();
  const { outcome, fencingToken, waitedUntil, error } = settled;
  send({ t: 'join', via, key, outcome, fencingToken, startedAt, endedAt });
  const wait: WaitRecord = {
    key,
    priority: 0,
    boundMs,
    startedAt: waitFrom,
    endedAt: waitedUntil?.at ?? wall(),
    stalledMs: (waitedUntil?.stalledMs ?? stalledMs) - stalledFrom,
  };
  op(via === 'run' ? 'join' : 'http-join', outcome, { wait, error });
}

async function joinByRun(key: string, joinTimeoutMs: number, random: Random): Promise<Settled> {
  // Set by the work when it runs in this call: the join ran it itself, under its own grant.
  const mine: { own?: { at: number; stalledMs: number; fencingToken: string } } = {};
  const holdAtLeastMs = random.chance(0.5) ? random.int(100, 1_200) : undefined;
  try {
    const value = await leases.run(
      key,
      async (lease) => {
        mine.own = { at: wall(), stalledMs, fencingToken: lease.fencingToken.toString() };
        await work(lease, random);
        return { fencingToken: lease.fencingToken.toString() };
      },
      { onBusy: { join: { timeoutMs: joinTimeoutMs } }, holdAtLeastMs },
    );
    return { outcome: mine.own ? 'own' : 'joined', fencingToken: value.fencingToken, waitedUntil: mine.own };
  } catch (error) {
    const { own } = mine;
    if (own) return { outcome: 'own-failed', fencingToken: own.fencingToken, waitedUntil: own, error };
    if (error instanceof LeaseJoinedRunError) {
      return { outcome: 'joined-error', fencingToken: error.fencingToken.toString(), error };
    }
    return { outcome: outcomeOf(error), error };
  }
}

/** Request id → when its own handler got the lease (it ran the work: no join). */
const ownRequests = new Map<string, { at: number; stalledMs: number }>();
const httpRandom = new Random(deriveSeed(config.seed, 0x10e));

async function joinByHttp(key: string, baseUrl: string): Promise<Settled> {
  const id = randomUUID();
  const response = await fetch(`${baseUrl}/j/${encodeURIComponent(key)}?op=${id}`, {
    method: 'POST',
    signal: AbortSignal.timeout(20_000),
  });
  const body = (await response.json().catch(() => ({}))) as { fencingToken?: string; drained?: string };
  const own = ownRequests.get(id);
  ownRequests.delete(id);
  if (response.status === 200) {
    return { outcome: own ? 'own' : 'joined', fencingToken: body.fencingToken, waitedUntil: own };
  }
  const outcome = response.status === 503 && body.drained ? 'drained' : String(response.status);
  return { outcome, waitedUntil: own };
}

@Controller()
export class JoinController {
  @Post('j/:key')
  @HttpCode(200)
  @Exclusive('{key}', { onBusy: { join: { timeoutMs: HTTP_JOIN_MS } } })
  async join(@Param('key') key: string, @Query('op') id: string, @CurrentLease() lease: Lease) {
    ownRequests.set(id, { at: wall(), stalledMs });
    await work(lease, httpRandom);
    return { fencingToken: lease.fencingToken.toString() };
  }
}
