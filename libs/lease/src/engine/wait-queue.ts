import { randomUUID } from 'node:crypto';
import type { Logger } from '@nestjs/common';
import type { Subscription } from 'rxjs';
import { unavailableOr } from '../errors/database-errors.js';
import { errorText, messages } from '../errors/lease.messages.js';
import {
  LeaseError,
  LeaseQueueFullError,
  LeaseShutdownError,
  LeaseUnavailableError,
  LeaseWaitTimeoutError,
} from '../errors/lease.errors.js';
import { batchedHeartbeat } from './heartbeat.js';
import type { HeldLease } from './held-lease.js';
import type { EngineSettings } from '../options/engine-settings.js';
import type { AcquiredRow, LeaseBackend, Refusal, WaiterPlace, Wakeups } from '../core/backend.js';
import { longTimeout, settleBy } from '../util/settle-by.js';
import { ONE_SECOND_MS } from '../options/limits.js';
import { ParkedPlaces } from './parked-places.js';
import type { Waiter, WaiterRequest } from './waiter.js';
import { ownRow } from '../options/slot-limits.js';

export type { Waiter, WaiterRequest } from './waiter.js';

/** A head-only wake-up as the NOTIFY brought it; `deliver()` does what it does by default (tests may hold it back). */
export interface HeadWakeup {
  readonly waiterId: string;
  readonly targetKey: string;
  /** The fencing token of the grant it carries, if any. */
  readonly grant?: bigint;
  deliver(): void;
}

export type AttemptAsWaiter = (waiter: Waiter) => Promise<HeldLease | null>;

/**
 * The priority line of this process: enqueues waiting calls once, keeps their rows alive with one batched heartbeat,
 * wakes them on NOTIFY or a jittered poll, and removes their rows when they give up. Who is granted next is decided
 * by the acquire statement itself (see `LeaseStore.tryAcquire`), never here.
 */
export class WaitQueue {
  private readonly waiters = new Map<string, Waiter>();
  /**
   * Waiters whose first attempt is in flight, each holding a room in the line (see `reserve`); a wake-up for one
   * (its NOTIFY may come before it waits) is kept on it as `pending`.
   */
  private readonly reserved = new Map<string, Waiter>();
  /** Reserved while this process was listening: a NOTIFY naming them after their first attempt reaches them. */
  private readonly heard = new WeakSet<Waiter>();
  private listening = false;
  private readonly byTarget = new Map<string, Set<Waiter>>();
  private notifier?: Wakeups;
  private heartbeat?: Subscription;
  private closed = false;
  /** What a head-only NOTIFY does to the waiter it names: wakes it (a test may replace it, see `internal.ts`). */
  onHead: (wakeup: HeadWakeup) => void = (wakeup) => wakeup.deliver();
  /** Per target: when to look again at a grant handed to someone (see `watchGrant`). */
  private readonly grantWatches = new Map<string, NodeJS.Timeout>();
  /** Aborted by close(): every wait in flight gives up its statement at once. */
  private readonly shutdown = new AbortController();
  /** Settles when each waiting call has settled (its row removed or granted), and each parked place left. */
  private readonly inFlight = new Set<Promise<void>>();
  /** Waiters with no call yet, queued by this process's releases of hot keys (see parked-places.ts). */
  readonly parked: ParkedPlaces = new ParkedPlaces({
    waitsFor: (targetKey) =>
      (this.byTarget.get(targetKey)?.size ?? 0) > 0 ||
      [...this.reserved.values()].some((waiter) => waiter.targetKey === targetKey),
    listening: () => this.listening,
    closed: () => this.closed,
    reserve: (request) => this.reserve(request),
    unreserve: (waiter) => this.unreserve(waiter),
    register: (waiter) => this.register(waiter),
    unregister: (waiter) => this.unregister(waiter),
    handOver: (parked, taker) => {
      this.waiters.delete(parked.id);
      this.byTarget.get(parked.targetKey)?.delete(parked);
      this.reserved.set(taker.id, taker);
      this.heard.add(taker);
    },
    newWaiter: (request) => this.newWaiter(request),
    leave: (waiter) => this.leave(waiter),
  });

  constructor(
    private readonly backend: LeaseBackend,
    private readonly options: EngineSettings,
    private readonly attempt: AttemptAsWaiter,
    private readonly logger: Logger,
    /** The `retryAfterMs` of a waiter refused for a full line (see `RetryAfterEstimates`). */
    private readonly retryAfterOf: (waiter: Waiter) => number = () => options.heartbeatIntervalMs,
  ) {}

  /** Waiting calls (a parked place, placed and not adopted, is no call). */
  get size(): number {
    return this.waiters.size - this.parked.placed;
  }

  /**
   * How long a statement in flight may run past the wait's deadline before the wait gives up on it: long enough for a
   * healthy database to finish (so the row is gone before the promise rejects), short enough to bound a stall.
   */
  get graceMs(): number {
    return Math.min(this.options.heartbeatIntervalMs, ONE_SECOND_MS);
  }

  /**
   * A waiter whose first attempt may queue it (`place`, see `LeaseStore`), with its room in this process's line taken
   * at once: calls started in the same turn, whose first attempts are all in flight before any of them waits, count
   * against `maxWaitersPerProcess` too. Null when the line is full or shut down (the call then attempts without
   * queuing, and is refused before it writes a row). Its room is given back by `wait` (which counts it as its own) or
   * by `unreserve` (the call never waits).
   */
  reserve(request: WaiterRequest): Waiter | null {
    if (this.closed || this.occupied() >= this.options.maxWaitersPerProcess) return null;
    const waiter = this.newWaiter(request);
    this.reserved.set(waiter.id, waiter);
    if (this.listening) this.heard.add(waiter);
    return waiter;
  }

  /** Gives back a reserved waiter's room (its first attempt was granted or failed: it never waits). */
  unreserve(waiter: Waiter): void {
    this.reserved.delete(waiter.id);
  }

  /** Waiting calls of this process, and calls whose first attempt holds a room in its line. */
  private occupied(): number {
    return this.waiters.size + this.reserved.size;
  }

  /** A waiter for a call about to wait, without a room reserved (`wait` checks the bound). */
  newWaiter({ targetKey, priority, holdMs, keyTemplate, leaseTimeoutMs }: WaiterRequest): Waiter {
    const waiter = { id: randomUUID(), targetKey, priority, holdAtLeastMs: holdMs, keyTemplate, evicted: false };
    return { ...waiter, pending: false, ...(leaseTimeoutMs === undefined ? {} : { leaseTimeoutMs }) };
  }

  /**
   * Waits in line until `until` (monotonic); resolves with the lease, or rejects (row removed first, unless the
   * database does not answer within the grace). A waiter already queued by its first attempt keeps its place.
   */
  wait(waiter: Waiter, until: number, waitTimeoutMs: number, signal?: AbortSignal): Promise<HeldLease> {
    const waiting = this.waitInLine(waiter, until, waitTimeoutMs, signal);
    const settled = waiting.then(
      () => undefined,
      () => undefined,
    );
    this.inFlight.add(settled);
    void settled.then(() => this.inFlight.delete(settled));
    return waiting;
  }

  private async waitInLine(
    waiter: Waiter,
    until: number,
    waitTimeoutMs: number,
    signal?: AbortSignal,
  ): Promise<HeldLease> {
    const { targetKey } = waiter;
    /** The last enqueue sent (or the first attempt that queued the waiter): a wait that gives up removes its row. */
    let enqueueing: Promise<WaiterPlace | null> | undefined = waiter.place ? Promise.resolve(waiter.place) : undefined;
    try {
      return await this.inLine(waiter, until, waitTimeoutMs, signal, (sent) => (enqueueing = sent));
    } catch (error) {
      this.unregister(waiter);
      // The row of an enqueue (even one still in flight) is removed once it has landed: before the promise rejects
      // when the database answers within the grace, else in the background. A row landing after the enqueue's bound
      // is born dead, and any other dies with its heartbeat.
      if (enqueueing) {
        const sent = enqueueing;
        const gone = sent.catch(() => undefined).then(() => this.removeRow(waiter));
        const giveUp = () => new Error(`no answer within ${this.graceMs} ms`);
        await settleBy(gone, performance.now() + this.graceMs, undefined, giveUp).catch((dequeueError: unknown) => {
          this.logger.warn(
            `Waiter row for "${targetKey}" not removed yet (${String(dequeueError)}); it goes when its statement ` +
              `lands, or expires within ${this.options.waiterTimeoutMs} ms`,
          );
        });
      }
      throw error;
    }
  }

  private async inLine(
    waiter: Waiter,
    until: number,
    waitTimeoutMs: number,
    signal: AbortSignal | undefined,
    sending: (enqueue: Promise<WaiterPlace | null>) => void,
  ): Promise<HeldLease> {
    const { targetKey, priority } = waiter;
    if (this.closed) throw new LeaseShutdownError(targetKey, 'waits');
    signal?.throwIfAborted();
    const timeout = () => new LeaseWaitTimeoutError(targetKey, waitTimeoutMs);
    const cutoff = until + this.graceMs;
    // Every statement of the wait is given up at once when the caller aborts or the service shuts down.
    const stop = signal ? AbortSignal.any([signal, this.shutdown.signal]) : this.shutdown.signal;
    if (this.options.notify) {
      this.notifier ??= this.backend.wakeups(
        {
          line: (key) => this.wakeTarget(key),
          all: () => this.wakeAll(),
          head: (waiterId, key, grant) =>
            this.onHead({ waiterId, targetKey: key, grant, deliver: () => this.wakeWaiter(waiterId, key, grant) }),
        },
        Math.max(1_000, this.options.waiterHeartbeatIntervalMs),
      );
      // Listening before the first queued attempt means no release is missed in between; but a LISTEN connection
      // that cannot open must not hold the wait past its deadline (the poll covers it).
      await settleBy(this.notifier.start(), cutoff, stop, timeout);
      this.listening = true;
    }
    // Checked with no await before register(): calls arriving while the LISTEN connection opens must count too, and
    // so must the rooms reserved by first attempts in flight (this waiter's own, if any, is its room).
    const others = this.occupied() - (this.reserved.has(waiter.id) ? 1 : 0);
    if (others >= this.options.maxWaitersPerProcess) {
      throw new LeaseQueueFullError(targetKey, this.retryAfterOf(waiter), messages.processLineFull(others));
    }
    this.register(waiter);
    // Queued behind a live waiter by its first attempt, while this process listened, with no wake-up since: it sleeps
    // at once. A release that ran beside that attempt and missed its row handed the key to a waiter ahead; its own turn
    // comes with a NOTIFY naming it (or a grant watch, or the poll). The head of the line looks once more instead (a
    // release that missed it freed the key, and no NOTIFY says so).
    let look = !(waiter.queuedBehind === true && this.heard.has(waiter) && waiter.granted === undefined);
    let lastError: unknown;
    try {
      while (true) {
        stop.throwIfAborted();
        const remaining = until - performance.now();
        if (remaining <= 0) throw new LeaseWaitTimeoutError(targetKey, waitTimeoutMs);
        if (!look && !waiter.pending) {
          look = true;
          await this.pause(waiter, remaining, stop);
          continue;
        }
        look = true;
        waiter.pending = false;
        try {
          if ((!waiter.place || waiter.evicted) && waiter.granted === undefined) {
            // A row landing after this bound is born dead (see WaiterStore.enqueue): no later than the wait's cutoff.
            const limitMs = Math.min(cutoff - performance.now(), this.options.waiterTimeoutMs);
            const enqueueing = this.backend.waiters.enqueue(targetKey, waiter.id, priority, waiter.place, limitMs);
            sending(enqueueing);
            const place = await settleBy(enqueueing, cutoff, stop, timeout);
            if (!place) {
              throw new LeaseQueueFullError(
                targetKey,
                this.retryAfterOf(waiter),
                messages.targetLineFull(this.options.maxWaitersPerTarget),
              );
            }
            waiter.place = place;
            waiter.evicted = false;
          }
          waiter.holdLeftMs = undefined;
          const lease = await settleBy(this.attempt(waiter), cutoff, stop, timeout, (late) => {
            void late?.release();
          });
          if (lease) {
            this.unregister(waiter);
            return lease;
          }
        } catch (error) {
          if ((error instanceof LeaseError && !(error instanceof LeaseUnavailableError)) || stop.aborted) throw error;
          // A database error is transient for a waiter, and so is a server in recovery (a failover under way): the
          // wait deadline bounds the retries, and its LeaseWaitTimeoutError's cause is the library's error too.
          lastError = unavailableOr(error, targetKey, 'wait in line for');
          this.logger.warn(`Waiting for "${targetKey}": attempt failed (${String(error)}); retrying`);
        }
        await this.pause(waiter, remaining, stop);
      }
    } catch (error) {
      if (error instanceof LeaseWaitTimeoutError && lastError) {
        throw Object.assign(error, { cause: lastError });
      }
      throw error;
    }
  }

  /** A NOTIFY (or anything else) says the line for `targetKey` may have moved. */
  wakeTarget(targetKey: string): void {
    for (const waiter of this.byTarget.get(targetKey) ?? []) this.wakeOne(waiter);
    for (const waiter of this.reserved.values()) if (waiter.targetKey === targetKey) this.wakeOne(waiter);
  }

  /**
   * A head-only NOTIFY names this waiter as the next in line: only it attempts — or, with a grant, confirms it. A
   * stale name (the waiter left, or is of another process) wakes nobody; a missed one is covered by the poll.
   */
  wakeWaiter(waiterId: string, targetKey?: string, grant?: bigint): void {
    if (grant !== undefined && targetKey !== undefined) this.watchGrant(targetKey, waiterId);
    const waiter = this.waiters.get(waiterId) ?? this.reserved.get(waiterId);
    if (!waiter) return;
    if (grant !== undefined) waiter.granted = grant;
    // A parked place with no call to take the grant passes it on at once (still reserved: when its release answers).
    if (grant !== undefined && this.parked.holds(waiter)) {
      void this.parked.unpark(waiter);
      return;
    }
    this.wakeOne(waiter);
  }

  /**
   * A grant was handed to `grantee` (of any process). If it never confirms it (it died after its last heartbeat),
   * the grant is free again waiterTimeoutMs after it, and no NOTIFY says so: this process's
   * first waiter of the target (by priority, then place) looks then. A later grant of the target replaces the watch.
   */
  private watchGrant(targetKey: string, grantee: string): void {
    clearTimeout(this.grantWatches.get(targetKey));
    this.grantWatches.delete(targetKey);
    const others = [...(this.byTarget.get(targetKey) ?? [])].filter((waiter) => waiter.id !== grantee);
    if (others.length === 0 || this.closed) return;
    const afterMs = this.options.waiterTimeoutMs + 10;
    const timer = setTimeout(() => {
      this.grantWatches.delete(targetKey);
      const first = [...(this.byTarget.get(targetKey) ?? [])]
        .filter((waiter) => waiter.place && waiter.id !== grantee)
        .sort((a, b) => b.priority - a.priority || (a.place!.seq < b.place!.seq ? -1 : 1))[0];
      if (first) this.wakeOne(first);
    }, afterMs);
    timer.unref();
    this.grantWatches.set(targetKey, timer);
  }

  wakeAll(): void {
    for (const waiter of this.waiters.values()) this.wakeOne(waiter);
    for (const waiter of this.reserved.values()) this.wakeOne(waiter);
  }

  /**
   * Removes a waiter's row, then releases by its id: a grant handed to it before the row went is passed on, whatever
   * the dequeue's snapshot saw (a no-op without one).
   */
  private async removeRow({ targetKey, id }: Waiter): Promise<void> {
    await this.backend.waiters.dequeue(targetKey, id);
    await this.backend.release(ownRow(targetKey), id, this.graceMs);
  }

  /**
   * `removeRow` for a waiter no call waits on any more (a parked place; a first attempt that queued its caller after
   * it gave up), tracked for close(); never rejects (a failure is logged: the row expires by itself).
   */
  leave(waiter: Waiter): Promise<void> {
    const gone = this.removeRow(waiter).catch((error: unknown) => {
      const expiry = `it expires within ${this.options.waiterTimeoutMs} ms`;
      this.logger.warn(`Waiter row for "${waiter.targetKey}" not removed (${String(error)}); ${expiry}`);
    });
    this.inFlight.add(gone);
    void gone.then(() => this.inFlight.delete(gone));
    return gone;
  }

  /**
   * Cancels every wait of this process and removes its rows (shutdown). Bounded whatever the network does: each wait
   * gives up its statement at once and spends at most the grace on removing its row.
   */
  async close(): Promise<void> {
    this.closed = true;
    this.shutdown.abort(new LeaseShutdownError(undefined, 'cancelled'));
    const queued = [...this.waiters.values()].filter((waiter) => waiter.place);
    for (const timer of this.grantWatches.values()) clearTimeout(timer);
    this.grantWatches.clear();
    // Parked places are among `queued` (their rows go with the others'); one whose release is still in flight leaves
    // when it answers (see `ParkedPlaces.settle`).
    this.parked.close();
    this.wakeAll();
    this.heartbeat?.unsubscribe();
    this.heartbeat = undefined;
    const giveUp = () => new Error(`no answer within ${this.graceMs} ms`);
    // Then a release by each waiter id passes on any grant handed to them before their rows went (no-ops otherwise).
    const leaving = this.backend.waiters
      .dequeueAll(queued)
      .then(() =>
        Promise.all(queued.map((waiter) => this.backend.release(ownRow(waiter.targetKey), waiter.id, this.graceMs))),
      );
    const removed = settleBy(leaving, performance.now() + this.graceMs, undefined, giveUp);
    await removed.catch((error: unknown) => {
      this.logger.warn(`Could not remove ${queued.length} waiter rows at shutdown (${String(error)}); they expire`);
    });
    // A call caught mid-statement (say, inserting its row) was not in `ids`: it removes its own row, and must do so
    // before the caller destroys the pool.
    await Promise.all(this.inFlight);
    await this.notifier?.close();
  }

  private wakeOne(waiter: Waiter): void {
    waiter.pending = true;
    waiter.wake?.();
  }

  private register(waiter: Waiter): void {
    this.reserved.delete(waiter.id);
    this.waiters.set(waiter.id, waiter);
    let line = this.byTarget.get(waiter.targetKey);
    if (!line) this.byTarget.set(waiter.targetKey, (line = new Set()));
    line.add(waiter);
    this.heartbeat ??= batchedHeartbeat(
      this.options.waiterHeartbeatIntervalMs,
      () => [...this.waiters.values()].filter((candidate) => candidate.place && !candidate.evicted),
      (batch) =>
        this.backend.waiters.renew(
          batch.map((candidate) => candidate.targetKey),
          batch.map((candidate) => candidate.id),
          this.options.waiterHeartbeatIntervalMs,
        ),
    ).subscribe((tick) => {
      if (tick.error) {
        this.logger.warn(`Waiter heartbeat failed (${errorText(tick.error)}); retrying next tick`);
        return;
      }
      for (const candidate of tick.batch) {
        // A row gone with a grant (direct handoff) is not an eviction: the waiter confirms the grant.
        if (!tick.kept?.has(candidate.id) && this.waiters.has(candidate.id) && candidate.granted === undefined) {
          candidate.evicted = true;
          this.wakeOne(candidate);
        }
      }
    });
  }

  private unregister(waiter: Waiter): void {
    this.reserved.delete(waiter.id);
    this.waiters.delete(waiter.id);
    const line = this.byTarget.get(waiter.targetKey);
    line?.delete(waiter);
    if (line?.size === 0) {
      this.byTarget.delete(waiter.targetKey);
      clearTimeout(this.grantWatches.get(waiter.targetKey));
      this.grantWatches.delete(waiter.targetKey);
    }
    if (this.waiters.size === 0) {
      this.heartbeat?.unsubscribe();
      this.heartbeat = undefined;
    }
  }

  /** Sleeps until a wake-up, the jittered poll, the end of a hold's tail or the wait's end, whichever comes first. */
  private pause(waiter: Waiter, remainingMs: number, signal: AbortSignal): Promise<void> {
    const jitter = 0.5 + Math.random() * 0.5;
    // A hold's tail ends with no NOTIFY: wake for its end (a few ms after, the database clock decides).
    const holdEnds = waiter.holdLeftMs === undefined ? Infinity : waiter.holdLeftMs + 5;
    return this.sleep(waiter, Math.min(remainingMs, this.options.waitPollIntervalMs * jitter, holdEnds), signal);
  }

  private sleep(waiter: Waiter, ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (waiter.pending || signal?.aborted || this.closed) return resolve();
      const done = () => {
        cancel();
        signal?.removeEventListener('abort', done);
        waiter.wake = undefined;
        resolve();
      };
      const cancel = longTimeout(done, ms);
      signal?.addEventListener('abort', done, { once: true });
      waiter.wake = done;
    });
  }
}

/**
 * A waiter's attempt when a NOTIFY brought it a grant: confirms it (`WaiterBackend.confirmGrant`). A grant passed on
 * meanwhile (it came too late) is a refusal, and the waiter queues again at its place at once.
 */
export async function confirmGrant(
  backend: LeaseBackend,
  waiter: Waiter,
  holdMs: number,
): Promise<AcquiredRow | Refusal> {
  waiter.granted = undefined;
  const row = await backend.waiters.confirmGrant(waiter.targetKey, waiter.id, holdMs, waiter.leaseTimeoutMs);
  if (row) return row;
  waiter.evicted = true;
  waiter.pending = true;
  return { refused: true, holdLeftMs: null };
}
