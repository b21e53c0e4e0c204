/**
 * The in-memory engine of `nest-pg-lease/testing`: the same doors (`LeaseService`, `@Exclusive`) over a Map instead
 * of PostgreSQL rows, for unit tests of an application's own code. A separate implementation of `ServiceEngine`
 * (the real engine's code is not forked): one process's view, with test controls standing in for the other processes
 * (`hold`, `takeOver`, `expire`, `lose`, `free`). It reuses the library's lease handle, call context, input checks
 * and snapshot shape, so what a caller sees — errors, signals, `fenced()` refusals, `list()` rows — is the real one's.
 */
import { randomUUID } from 'node:crypto';
import { Logger } from '@nestjs/common';
import { type Observable, Subject } from 'rxjs';
import type { EntityManager } from 'typeorm';
import { BorrowedLease, HeldLease, type LeaseHandleOwner } from '../engine/held-lease.js';
import { JoinRuns } from '../engine/join-runs.js';
import { LeaseContext } from '../engine/lease-context.js';
import { RetryAfterEstimates } from '../engine/retry-after.js';
import { busyError } from '../engine/semaphore.js';
import {
  type EndedGrant,
  grantedEvent,
  lostEvent,
  preemptedEvent,
  releasedEvent,
  waitEndedEvent,
} from '../engine/lease-events.js';
import { snapshotsOf } from '../engine/lease-snapshot.js';
import { type LeaseEntry, markServiceEngine, type ServiceEngine } from '../engine/service-engine.js';
import { ShutdownDrain } from '../engine/shutdown-drain.js';
import {
  LeaseLimitConflictError,
  LeaseLostError,
  LeaseQueueFullError,
  LeaseShutdownError,
  LeaseWaitTimeoutError,
} from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { LeaseEvent, LeaseSnapshot } from '../interfaces/lease-event.interface.js';
import type { LeaseLossReason } from '../interfaces/lease-loss-reason.interface.js';
import type { LeaseModuleOptions } from '../interfaces/lease-module-options.interface.js';
import type { EngineSettings } from '../options/engine-settings.js';
import type { FencedOptions, Lease } from '../interfaces/lease.interface.js';
import { callRequest, type LeaseRequest } from '../options/call-input.js';
import { type LeaseCall, preemptGraceOf, waitBoundMs, waits, type WaitingPlan } from '../options/busy-policy.js';
import { MAX_TIMER_MS } from '../options/limits.js';
import { resolveLeaseOptions } from '../options/resolve-lease-options.js';
import { rowSlotOf } from '../options/slot-limits.js';

/**
 * This engine's name of a row: a key's own row is the key itself, slot `i` of a semaphore `<key>\0<i>` — NUL is in no
 * key (`assertTargetKey`), so no key names another's slot. Private to this file (the tables have a slot column).
 */
const rowName = (targetKey: string, slot: number) => `${targetKey}\0${slot}`;

/** A row name's key and, for a semaphore's slot, its slot. */
function rowOfName(name: string): { targetKey: string; slot?: number } {
  const at = name.indexOf('\0');
  return at < 0 ? { targetKey: name } : { targetKey: name.slice(0, at), slot: Number(name.slice(at + 1)) };
}

/** The row a lease holds (see `rowName`). */
const rowOfLease = (lease: HeldLease) =>
  lease.slot === undefined ? lease.targetKey : rowName(lease.targetKey, lease.slot);

/** Runs a fenced write's work in the test's transaction (see `LeaseTestingOptions.fencedTransaction`). */
export type FencedTransaction = <T>(work: (manager: EntityManager) => Promise<T>) => Promise<T>;

/** Options of the in-memory lease service: the module's (grouped) options, plus how `fenced()` runs its work. */
export interface LeaseTestingOptions extends LeaseModuleOptions {
  /**
   * Runs the work of every `lease.fenced(work)` that is allowed to write, e.g. `(work) => work(fakeManager)` or
   * `(work) => dataSource.transaction(work)`. @default runs the work with an EntityManager that throws on any use
   */
  fencedTransaction?: FencedTransaction;
}

/** A holder of a key that is not this service: another process, as the test controls make one. */
interface ForeignHolder {
  readonly owner: string;
  readonly fencingToken: bigint;
  readonly since: number;
}

/** A key whose holder a preempting call asked to stop: taken until it releases, or the grace ends. */
interface Yielding {
  /** This service's preempted lease (none for a foreign holder). */
  readonly lease?: HeldLease;
  readonly previous: EndedGrant;
  readonly at: number;
  readonly timer: NodeJS.Timeout;
  /** The grace ended before the holder released. */
  forced: boolean;
}

interface MemoryWaiter {
  readonly request: LeaseRequest;
  readonly seq: number;
  readonly since: number;
  readonly grant: (lease: HeldLease) => void;
  readonly fail: (error: unknown) => void;
}

/** What `fenced()` hands the work when the test gave no `fencedTransaction`: any use explains what to do. */
const NO_MANAGER = new Proxy({} as EntityManager, {
  get(_target, property) {
    if (property === 'then' || typeof property === 'symbol') return undefined;
    throw new TypeError(
      `lease.fenced(): the in-memory lease service has no database (EntityManager.${String(property)} was used); ` +
        'give LeaseTestingModule.forRoot({ fencedTransaction: (work) => work(yourManager) })',
    );
  },
});

export class InMemoryLeaseEngine implements ServiceEngine, LeaseHandleOwner {
  readonly events$: Observable<LeaseEvent>;
  readonly options: EngineSettings;
  private readonly events = new Subject<LeaseEvent>();
  private readonly context = new LeaseContext();
  private readonly fencedTransaction: FencedTransaction;
  /** This service's leases, by row: a key's own, or a semaphore's slot (`rowName`). */
  private readonly held = new Map<string, HeldLease>();
  private readonly acquiredAt = new WeakMap<HeldLease, number>();
  /** The limit each slot holder asked (`limit` above 1). */
  private readonly slotLimits = new WeakMap<HeldLease, number>();
  private readonly priorities = new WeakMap<HeldLease, number>();
  /** Keys whose holder was preempted and has not released yet (see `preempt`). */
  private readonly yielding = new Map<string, Yielding>();
  /** Keys held by "another process" (the test controls). */
  private readonly foreign = new Map<string, ForeignHolder>();
  /** Keys whose holder's lease expired without a release: the next acquisition is a takeover. */
  private readonly expired = new Set<string>();
  /** holdAtLeastMs tails: key → monotonic time until which the key stays taken. */
  private readonly tails = new Map<string, { until: number; timer: NodeJS.Timeout }>();
  private readonly lines = new Map<string, MemoryWaiter[]>();
  private lastToken = 0n;
  private seq = 0;
  private closed = false;
  private closing?: Promise<void>;
  /** The real engine's drain of `close()`, over this engine's leases (told whenever one is dropped). */
  private readonly drain = new ShutdownDrain(this.held, new Logger('LeaseService'));
  private readonly joins = new JoinRuns(this);
  /** When a refused caller may retry, from this engine's events (as the PostgreSQL engine's, without hold tails). */
  private readonly estimates: RetryAfterEstimates;

  constructor(options: LeaseTestingOptions = {}) {
    const { fencedTransaction, ...moduleOptions } = options;
    this.options = resolveLeaseOptions(moduleOptions);
    this.estimates = new RetryAfterEstimates(this.options.leaseTimeoutMs);
    this.fencedTransaction = fencedTransaction ?? ((work) => work(NO_MANAGER));
    this.events$ = this.events.asObservable();
    markServiceEngine(this);
  }

  async init(): Promise<void> {}

  async onModuleInit(): Promise<void> {
    await this.init();
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.close();
  }

  /**
   * Refuses new calls and cancels every wait, then drains as the real engine does (docs/shutdown.md):
   * the leases in use keep going until each is released or lost, or `shutdownGraceMs` passes; what is still held is
   * then released, its signal aborted with `LeaseShutdownError`. Idempotent.
   */
  close(): Promise<void> {
    this.closing ??= this.shutDown();
    return this.closing;
  }

  private async shutDown(): Promise<void> {
    this.closed = true;
    for (const [key, line] of this.lines) {
      for (const waiter of [...line]) this.endWait(waiter, new LeaseShutdownError(key, 'cancelled'));
    }
    await this.drain.wait(this.options.shutdownGraceMs);
    for (const lease of [...this.held.values()]) {
      await this.release(lease, () => new LeaseShutdownError(lease.targetKey, 'released'));
    }
    for (const tail of this.tails.values()) clearTimeout(tail.timer);
    this.tails.clear();
    this.events.complete();
  }

  current(): Lease | undefined {
    return this.context.current();
  }

  within<T>(lease: Lease, work: () => T): T {
    return this.context.run(lease, work);
  }

  borrow(targetKey: string): Lease | undefined {
    const held = this.context.find(targetKey);
    return held && new BorrowedLease(held);
  }

  async tryAcquire(request: LeaseRequest): Promise<Lease | null> {
    const reentrant = this.context.find(request.targetKey);
    if (reentrant) return new BorrowedLease(reentrant);
    return this.tryOnce(request);
  }

  async acquire(call: LeaseCall<WaitingPlan>): Promise<Lease> {
    const { request, busy, signal } = call;
    signal?.throwIfAborted();
    const reentrant = this.context.find(request.targetKey);
    if (reentrant) return new BorrowedLease(reentrant);
    return this.waitFor(request, waitBoundMs(busy, this.options), signal, preemptGraceOf(busy, this.options));
  }

  async enter(call: LeaseCall): Promise<LeaseEntry> {
    const { request, busy, signal } = call;
    signal?.throwIfAborted();
    const reentrant = this.context.find(request.targetKey);
    if (reentrant) return { lease: new BorrowedLease(reentrant), exit: () => Promise.resolve() };
    const lease = waits(busy)
      ? await this.waitFor(request, waitBoundMs(busy, this.options), signal, preemptGraceOf(busy, this.options))
      : await this.tryOnce(request);
    if (!lease) throw busyError(request.targetKey, request.limit, this.estimates.answer(request, call.retryAfter));
    return { lease, exit: () => lease.release() };
  }

  list(targetKey?: string): Promise<LeaseSnapshot[]> {
    const now = performance.now();
    const keys = new Set([...this.held.keys(), ...this.foreign.keys(), ...this.lines.keys()]);
    const rows = [...keys]
      .filter((key) => targetKey === undefined || rowOfName(key).targetKey === targetKey)
      .sort()
      .flatMap((key) => {
        const row = rowOfName(key);
        const mine = this.held.get(key);
        const other = this.foreign.get(key);
        const holder = mine
          ? { owner: this.options.owner, fencingToken: mine.fencingToken, since: this.acquiredAt.get(mine) ?? now }
          : other;
        const held = holder
          ? [
              {
                state: 'held' as const,
                target_id: row.targetKey,
                slot: row.slot === undefined ? 0 : rowSlotOf(row.slot),
                owner: holder.owner,
                priority: (mine && this.priorities.get(mine)) ?? 0,
                effective_priority: String((mine && this.priorities.get(mine)) ?? 0),
                fencing_token: String(holder.fencingToken),
                seq: null,
                age_ms: now - holder.since,
                since_heartbeat_ms: 0,
                timeout_ms: this.options.leaseTimeoutMs,
              },
            ]
          : [];
        const waiting = (this.lines.get(key) ?? []).map((waiter) => ({
          state: 'waiting' as const,
          target_id: key,
          slot: null,
          owner: this.options.owner,
          priority: waiter.request.priority,
          effective_priority: String(waiter.request.priority),
          fencing_token: null,
          seq: String(waiter.seq),
          age_ms: now - waiter.since,
          since_heartbeat_ms: 0,
          timeout_ms: this.options.waiterTimeoutMs,
        }));
        return [...held, ...waiting];
      });
    return Promise.resolve(snapshotsOf(rows, this.options.owner));
  }

  heldLeases(): Lease[] {
    return [...this.held.values()];
  }

  waitingCount(): number {
    let count = 0;
    for (const line of this.lines.values()) count += line.length;
    return count;
  }

  /** `lease.fenced(work)`: refused with `LeaseLostError` once the lease is not held; else the test's transaction. */
  async fenced<T>(lease: HeldLease, work: (manager: EntityManager) => Promise<T>, options?: FencedOptions): Promise<T> {
    if (!lease.isHeld()) throw new LeaseLostError(lease.targetKey, lease.lossReason);
    const result = await this.fencedTransaction(work);
    // `{ release: true }`: the release rides on the work's (the test's) transaction; here, once it resolved.
    if (options?.release === true) await this.release(lease);
    return result;
  }

  /** `onBusy: 'join'`: within this service only (no other process to hear from). */
  joinRun<T>(call: LeaseCall, work: (lease: Lease) => Promise<T> | T): Promise<T> {
    return this.joins.run(call, work);
  }

  release(lease: HeldLease, reason?: () => unknown): Promise<void> {
    if (!lease.markReleased(reason)) return Promise.resolve();
    const yielding = this.yielding.get(lease.targetKey);
    // A preempted holder releasing in its grace: the row was still its own (the real engine's release lands).
    if (yielding?.lease === lease) this.endYield(lease.targetKey);
    else if (this.held.get(rowOfLease(lease)) !== lease) return Promise.resolve();
    this.held.delete(rowOfLease(lease));
    this.drain.forgotten();
    const heldMs = performance.now() - (this.acquiredAt.get(lease) ?? performance.now());
    this.emit(releasedEvent(lease, heldMs));
    this.grantNext(lease.targetKey);
    return Promise.resolve();
  }

  // ---- test controls (see LeaseTestingController) ----

  /** Another owner holds `targetKey` (free now, or taken from this service's holder: its lease is lost). */
  hold(targetKey: string, owner: string): bigint {
    const request = callRequest(targetKey, {});
    const fencingToken = this.nextToken();
    this.foreign.set(request.targetKey, { owner, fencingToken, since: performance.now() });
    return fencingToken;
  }

  /** Another owner takes `targetKey` over with a higher fencing token: the holder loses it (`taken-over`). */
  takeOver(targetKey: string, owner: string): bigint {
    const lease = this.held.get(targetKey);
    if (lease) this.lose(lease, 'taken-over');
    return this.hold(targetKey, owner);
  }

  /** The key's lease expires: its holder (this service's) loses it (`renewal-deadline`), another holder is gone. */
  expire(targetKey: string): void {
    const lease = this.held.get(targetKey);
    if (lease) this.lose(lease, 'renewal-deadline');
    if (lease || this.foreign.delete(targetKey)) this.expired.add(targetKey);
    this.grantNext(targetKey);
  }

  /** This service's lease on `targetKey` is lost for `reason`; the key is free (a lost row is an expired one). */
  loseLease(targetKey: string, reason: Exclude<LeaseLossReason, 'released'>): void {
    const lease = this.held.get(targetKey);
    if (!lease) return;
    this.lose(lease, reason);
    this.expired.add(targetKey);
    this.grantNext(targetKey);
  }

  /** The other owner of `targetKey` releases it (waiters are served). */
  free(targetKey: string): void {
    if (!this.foreign.delete(targetKey)) return;
    if (this.yielding.get(targetKey)?.lease === undefined) this.endYield(targetKey);
    this.grantNext(targetKey);
  }

  // ---- internals ----

  private nextToken(): bigint {
    return ++this.lastToken;
  }

  private taken(key: string): boolean {
    return this.held.has(key) || this.foreign.has(key) || this.tails.has(key) || this.yielding.has(key);
  }

  /** A live waiter at least as urgent as a newcomer of `priority` is ahead of it. */
  private waiterAhead(key: string, priority: number): boolean {
    return (this.lines.get(key) ?? []).some((waiter) => waiter.request.priority >= priority);
  }

  /** The rows a request may take: the key's own, or its slots (`limit` above 1). */
  private rowsOf(request: LeaseRequest): string[] {
    const { targetKey, limit } = request;
    return limit > 1 ? Array.from({ length: limit }, (_, slot) => rowName(targetKey, slot)) : [targetKey];
  }

  /**
   * Whether `request` may be granted now: a free row, and fewer waiters at least as urgent ahead of it than free rows
   * (no barging; `ahead` = false for the line's own head). Another limit holding the key is a `LeaseLimitConflictError`.
   */
  private grantable(request: LeaseRequest, ahead = true): boolean {
    const { targetKey, limit } = request;
    if (limit > 1) {
      const held = this.heldLimit(targetKey);
      if (held !== undefined && held !== limit) throw new LeaseLimitConflictError(targetKey, limit, held);
    }
    const free = this.rowsOf(request).filter((row) => !this.taken(row)).length;
    const line = this.lines.get(targetKey) ?? [];
    const before = ahead ? line.filter((waiter) => waiter.request.priority >= request.priority).length : 0;
    return free > before;
  }

  /** The limit the key is held under: of its slots' holders, or 1 for a holder of the key's own row. */
  private heldLimit(targetKey: string): number | undefined {
    if (this.held.has(targetKey) || this.foreign.has(targetKey)) return 1;
    for (const lease of this.held.values()) {
      if (lease.targetKey === targetKey && lease.slot !== undefined) return this.slotLimits.get(lease);
    }
    return undefined;
  }

  private tryOnce(request: LeaseRequest): Promise<HeldLease | null> {
    if (this.closed) return Promise.reject(new LeaseShutdownError(request.targetKey));
    try {
      if (!this.grantable(request)) {
        this.emit({ type: 'busy', targetKey: request.targetKey, keyTemplate: request.keyTemplate, at: new Date() });
        return Promise.resolve(null);
      }
    } catch (error) {
      return Promise.reject(error);
    }
    return Promise.resolve(this.grant(request));
  }

  /** `waitInLine`; with `graceMs`, a preempting call (docs/preemption.md): see `preempt`. */
  private async waitFor(
    request: LeaseRequest,
    waitTimeoutMs: number,
    signal?: AbortSignal,
    graceMs?: number,
  ): Promise<Lease> {
    const preempting = graceMs === undefined ? undefined : this.preempt(request, graceMs);
    const lease = await this.waitInLine(request, waitTimeoutMs, signal);
    if (preempting) {
      const { previous, forced, at } = preempting;
      this.emit(preemptedEvent(lease, request.priority, this.options.owner, previous, forced, performance.now() - at));
    }
    return lease;
  }

  /**
   * Asks the key's holder — this service's lease, or a foreign one (priority 0) — to stop when the caller may preempt
   * it (strictly lower priority, no waiter ahead): this service's lease is lost at once (`preempted`); the key stays
   * taken until its holder releases (`release`, `free`) or the grace ends, and its line is served then.
   */
  private preempt(request: LeaseRequest, graceMs: number): Yielding | undefined {
    const { targetKey: key, priority } = request;
    if (this.yielding.has(key) || this.waiterAhead(key, priority)) return undefined;
    const mine = this.held.get(key);
    const other = this.foreign.get(key);
    const previous = mine
      ? { fencingToken: mine.fencingToken, priority: this.priorities.get(mine) ?? 0, owner: this.options.owner }
      : other && { fencingToken: other.fencingToken, priority: 0, owner: other.owner };
    if (!previous || previous.priority >= priority) return undefined;
    const timer = setTimeout(
      () => {
        yielding.forced = true;
        this.endYield(key);
        if (!mine) this.foreign.delete(key);
        this.grantNext(key);
      },
      Math.min(graceMs, MAX_TIMER_MS),
    );
    timer.unref();
    const yielding: Yielding = { lease: mine, previous, at: performance.now(), timer, forced: false };
    this.yielding.set(key, yielding);
    if (mine) this.lose(mine, 'preempted');
    return yielding;
  }

  private endYield(key: string): void {
    clearTimeout(this.yielding.get(key)?.timer);
    this.yielding.delete(key);
  }

  private async waitInLine(request: LeaseRequest, waitTimeoutMs: number, signal?: AbortSignal): Promise<HeldLease> {
    const { targetKey, priority, keyTemplate } = request;
    if (this.closed) throw new LeaseShutdownError(targetKey, 'waits');
    if (this.grantable(request)) return this.grant(request);
    if (waitTimeoutMs === 0) throw new LeaseWaitTimeoutError(targetKey, 0);
    const line = this.lines.get(targetKey) ?? [];
    if (this.waitingCount() >= this.options.maxWaitersPerProcess) {
      throw new LeaseQueueFullError(
        targetKey,
        this.estimates.estimate(request),
        messages.processLineFull(this.waitingCount()),
      );
    }
    if (line.length >= this.options.maxWaitersPerTarget) {
      throw new LeaseQueueFullError(
        targetKey,
        this.estimates.estimate(request),
        messages.targetLineFull(this.options.maxWaitersPerTarget),
      );
    }
    this.emit({ type: 'waiting', targetKey, keyTemplate, priority, at: new Date() });
    const since = performance.now();
    return new Promise<HeldLease>((resolve, reject) => {
      const ended = (outcome: 'granted' | 'timeout' | 'aborted' | 'error') => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.emit(waitEndedEvent({ targetKey, keyTemplate, priority }, outcome, performance.now() - since));
      };
      const leave = (outcome: 'timeout' | 'aborted' | 'error', error: unknown) => {
        const index = line.indexOf(waiter);
        if (index < 0) return;
        line.splice(index, 1);
        if (line.length === 0) this.lines.delete(targetKey);
        ended(outcome);
        reject(error);
        // A waiter that leaves may have been what kept a newcomer of lower priority out: nothing to grant here (the
        // key is still taken, or the line's next waiter was served when the key became free).
      };
      const waiter: MemoryWaiter = {
        request,
        seq: ++this.seq,
        since,
        grant: (lease) => {
          ended('granted');
          resolve(lease);
        },
        fail: (error) => leave('error', error),
      };
      const timer = setTimeout(
        () => leave('timeout', new LeaseWaitTimeoutError(targetKey, waitTimeoutMs)),
        Math.min(waitTimeoutMs, MAX_TIMER_MS),
      );
      timer.unref();
      const onAbort = () => leave('aborted', signal?.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      // Grant order: highest priority first, first come first served within a priority.
      const at = line.findIndex((other) => other.request.priority < priority);
      line.splice(at < 0 ? line.length : at, 0, waiter);
      this.lines.set(targetKey, line);
    });
  }

  private endWait(waiter: MemoryWaiter, error: unknown): void {
    waiter.fail(error);
  }

  /** Serves the heads of the key's line while they find a free row (a semaphore's release frees one slot). */
  private grantNext(row: string): void {
    const key = rowOfName(row).targetKey;
    for (;;) {
      const line = this.lines.get(key);
      const head = line?.[0];
      if (this.closed || !head) return;
      try {
        if (!this.grantable(head.request, false)) return;
      } catch (error) {
        head.fail(error);
        continue;
      }
      line.shift();
      if (line.length === 0) this.lines.delete(key);
      head.grant(this.grant(head.request));
    }
  }

  private grant(request: LeaseRequest): HeldLease {
    const { targetKey, priority, holdMs, keyTemplate } = request;
    const now = performance.now();
    const row = this.rowsOf(request).find((candidate) => !this.taken(candidate))!;
    const lease = new HeldLease(targetKey, randomUUID(), this.nextToken(), now, MAX_TIMER_MS, this, () => undefined);
    lease.keyTemplate = keyTemplate;
    const { slot } = rowOfName(row);
    if (slot !== undefined) {
      lease.rowSlot = rowSlotOf(slot);
      this.slotLimits.set(lease, request.limit);
    }
    lease.tookOver = this.expired.delete(row);
    this.held.set(row, lease);
    this.acquiredAt.set(lease, now);
    this.priorities.set(lease, priority);
    if (holdMs > 0) this.holdTail(row, now + holdMs);
    this.emit(grantedEvent(lease, priority, this.options.owner, lease.tookOver ? { previousOwner: null } : undefined));
    return lease;
  }

  /** The key stays taken until `until` (holdAtLeastMs), released or not; then its line is served. */
  private holdTail(key: string, until: number): void {
    const timer = setTimeout(() => {
      this.tails.delete(key);
      this.grantNext(key);
    }, until - performance.now());
    timer.unref();
    this.tails.set(key, { until, timer });
  }

  private lose(lease: HeldLease, reason: Exclude<LeaseLossReason, 'released'>): void {
    if (!lease.markLost(reason)) return;
    this.held.delete(rowOfLease(lease));
    this.drain.forgotten();
    this.emit(lostEvent(lease, reason, performance.now() - (this.acquiredAt.get(lease) ?? performance.now())));
  }

  emit(event: LeaseEvent): void {
    this.estimates.observe(event);
    if (!this.events.closed) this.events.next(event);
  }
}
