import { randomUUID } from 'node:crypto';
import { type BeforeApplicationShutdown, Logger, type OnModuleInit } from '@nestjs/common';
import { type Observable, Subject } from 'rxjs';
import type { DataSource, EntityManager } from 'typeorm';
import { BootstrapChecks } from './bootstrap-checks.js';
import { FencedTransactions } from './fenced-transaction.js';
import { LeaseHeartbeat } from './lease-heartbeat.js';
import { snapshotsOf } from './lease-snapshot.js';
import { ReleaseRetries } from './release-retries.js';
import { unavailableOr } from '../errors/database-errors.js';
import { messages } from '../errors/lease.messages.js';
import {
  LeaseBusyError,
  LeaseLostError,
  LeaseQueueFullError,
  LeaseShutdownError,
  LeaseUnavailableError,
  LeaseWaitTimeoutError,
} from '../errors/lease.errors.js';
import type { LeaseLossReason } from '../interfaces/lease-loss-reason.interface.js';
import { closeStepMs, connectBoundMs, connectionCloseMs, PURGE_INTERVAL_MS } from '../options/bounds.js';
import type { Lease } from '../interfaces/lease.interface.js';
import { BorrowedLease, HeldLease, type LeaseHandleOwner } from './held-lease.js';
import { LeaseDatabase, type LeaseDataSourceRef } from '../database/lease-database.js';
import { LeaseContext } from './lease-context.js';
import type { LeaseModuleOptions, ResolvedLeaseOptions } from '../interfaces/lease-module-options.interface.js';
import { resolveLeaseOptions } from '../options/resolve-lease-options.js';
import { LeaseStore } from '../store/lease-store.js';
import { DedicatedConnection } from '../database/dedicated-connection.js';
import type { AcquireOptions, TryAcquireOptions } from '../interfaces/acquire-options.interface.js';
import type { AcquireOutcome, LeaseEvent, LeaseSnapshot } from '../interfaces/lease-event.interface.js';
import {
  assertHoldAtLeastMs,
  assertPriority,
  assertTargetKey,
  checkCall,
  keyTemplateOf,
} from '../options/call-input.js';
import { publish } from '../observability/diagnostics.js';
import {
  activeSpanSetter,
  holderSpan,
  type LeaseSpan,
  loadTracing,
  type SpanAttributes,
  startSpan,
} from '../observability/tracing.js';
import { settleBy } from '../util/settle-by.js';
import { type Waiter, WaitQueue } from './wait-queue.js';

/** A call about to wait, queued by its first attempt when refused. */
interface QueueAs {
  readonly waiter: Waiter;
}

/** A lease entered by `run` or `@Exclusive`, and how to leave it. */
export interface LeaseEntry {
  readonly lease: Lease;
  readonly exit: () => Promise<void>;
}

/** One call's input, checked once where it enters the engine; everything below trusts it. */
interface LeaseRequest {
  readonly targetKey: string;
  readonly priority: number;
  readonly holdMs: number;
  /** What the key is an instance of: traces (and metrics) name the call by it, never by the key. */
  readonly keyTemplate: string;
}

/**
 * The one engine behind every door (`LeaseService`'s methods, `@Exclusive` on controllers and on providers):
 * acquires leases with one statement, renews all of this process's leases with one batched heartbeat, aborts a
 * lease's signal when it is lost, fences writes, and releases. Internal: `LeaseService` is its public face; the doors
 * (exclusive-call, the explorer) use it directly for `enter` / `within`. Nest runs its lifecycle hooks.
 */
export class LeaseEngine implements LeaseHandleOwner, OnModuleInit, BeforeApplicationShutdown {
  /** acquired, taken-over, renewed, renew-failed, lost, released, busy, waiting, wait-ended. */
  readonly events$: Observable<LeaseEvent>;
  /** The resolved options (defaults applied). */
  readonly options: ResolvedLeaseOptions;

  // Named after the public class: that is the name users know from the log lines.
  private readonly logger = new Logger('LeaseService');
  private readonly events = new Subject<LeaseEvent>();
  private readonly store: LeaseStore;
  private readonly context = new LeaseContext();
  private readonly held = new Map<string, HeldLease>();
  /**
   * What close() waits for, each settled (never rejecting): calls in flight (acquiring or waiting), acquire statements
   * in flight (one a call gave up on may still land), releases in flight.
   */
  private readonly inFlight = new Set<Promise<void>>();
  private readonly acquiredAt = new WeakMap<HeldLease, number>();
  private readonly queue: WaitQueue;
  private readonly heartbeatConnection: DedicatedConnection;
  private readonly waiterHeartbeatConnection: DedicatedConnection;
  private closing?: Promise<void>;
  private readonly database: LeaseDatabase;
  private readonly checks: BootstrapChecks;
  private readonly heartbeat: LeaseHeartbeat;
  private readonly fencing: FencedTransactions;
  private readonly retries: ReleaseRetries;
  /** The next purge of free rows (see `purge`). */
  private purgeTimer?: NodeJS.Timeout;

  constructor(dataSource: DataSource | LeaseDataSourceRef, options: LeaseModuleOptions = {}) {
    this.options = resolveLeaseOptions(options);
    void loadTracing();
    this.database = new LeaseDatabase(dataSource, this.options);
    this.events$ = this.events.asObservable();
    // Outside a transaction pooler the heartbeat connections are sessions of their own: bounded by session settings,
    // a renewal is one statement, one round trip. Through the pooler each renewal frames its own bounds.
    const ownSessions = this.options.pooler !== 'transaction' || this.options.sessionUrl !== null;
    const { heartbeatIntervalMs, waiterHeartbeatIntervalMs } = this.options;
    const closeMs = connectionCloseMs(this.options);
    // Opening a connection may take longer than a tick (a busy server's fork and authentication): the tick fails, the
    // connection goes on opening within its own bound, and the next tick uses it. Cut at every tick instead, a
    // connection slower than one interval would never open, and every lease would be lost.
    const connectMs = connectBoundMs(this.options);
    this.heartbeatConnection = new DedicatedConnection(
      () => this.database.sessionConfig('heartbeat'),
      connectMs,
      ownSessions ? heartbeatIntervalMs : undefined,
      closeMs,
    );
    // Waiters renew on a connection of their own: a slow or failing waiter renewal must never delay a lease renewal.
    this.waiterHeartbeatConnection = new DedicatedConnection(
      () => this.database.sessionConfig('waiters'),
      connectMs,
      ownSessions ? waiterHeartbeatIntervalMs : undefined,
      closeMs,
    );
    this.store = new LeaseStore(
      this.database.statements,
      this.heartbeatConnection,
      this.options,
      this.waiterHeartbeatConnection,
    );
    this.queue = new WaitQueue(
      this.store,
      this.options,
      () => this.database.sessionConfig('listen'),
      (waiter) =>
        this.attempt(waiter.targetKey, waiter.priority, waiter.holdAtLeastMs, waiter, undefined, waiter.keyTemplate),
      this.logger,
    );
    this.checks = new BootstrapChecks(this.database, this.store, this.options, this.logger);
    const lose = this.lose.bind(this);
    this.heartbeat = new LeaseHeartbeat(this.store, this.options, this.logger, this.held, lose, (event) =>
      this.emit(event),
    );
    this.fencing = new FencedTransactions(this.database, this.store, lose);
    this.retries = new ReleaseRetries(
      this.store,
      this.options,
      this.logger,
      (work) => this.track(work),
      () => this.closing !== undefined,
    );
  }

  /** Checks the DataSource and the tables (creating them when `createSchema` is set). Nest calls it at bootstrap. */
  async init(): Promise<void> {
    const [systemId] = await Promise.all([this.checks.run(), loadTracing()]);
    this.heartbeat.systemId = systemId;
    // The first purge at a random point of the first interval: processes restarted together spread out, and a
    // bootstrap never waits for (or competes with) a purge.
    this.schedulePurge(PURGE_INTERVAL_MS * (0.1 + Math.random() * 0.9));
  }

  /**
   * Purges free rows of keys granted longer ago than the purge bound (`LeaseStore.purge`), tracked for close(); a
   * failure is logged and the next run tries again. Resolves with the count deleted (null: it failed).
   */
  purgeNow(): Promise<number | null> {
    return this.track(
      this.store
        .purge(() => this.closing !== undefined)
        .catch((error: unknown) => {
          this.logger.warn(`Purging free lease rows failed (retried later): ${String(error)}`);
          return null;
        }),
    );
  }

  /** The next purge in `delayMs`, then every `PURGE_INTERVAL_MS` (± a tenth). */
  private schedulePurge(delayMs: number): void {
    if (this.closing !== undefined) return;
    clearTimeout(this.purgeTimer);
    this.purgeTimer = setTimeout(() => {
      void this.purgeNow().finally(() => this.schedulePurge(PURGE_INTERVAL_MS * (0.9 + Math.random() * 0.2)));
    }, delayMs);
    this.purgeTimer.unref();
  }

  async onModuleInit(): Promise<void> {
    await this.init();
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.close();
  }

  /**
   * Aborts and releases every held lease, cancels every wait and removes its row; waits for calls and statements in
   * flight (one landing meanwhile gives its row back itself: see `attempt`). Idempotent. Every step is bounded
   * (`closeStepMs`), whatever the network does; once it resolves, the process holds no connection of the library's,
   * and — when the database answered — has no live lease row and no live waiter row.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      clearTimeout(this.purgeTimer);
      const stepMs = closeStepMs(this.options);
      const within = async (what: string, work: Promise<unknown>) => {
        const giveUp = () => new Error(`${what} still in flight after ${stepMs} ms`);
        await settleBy(work, performance.now() + stepMs, undefined, giveUp).catch((error: unknown) =>
          this.logger.warn(`Shutdown: ${String(error)}; what they hold expires by itself`),
        );
      };
      await within('waits', this.queue.close());
      // Calls and statements in flight (settled promises; what lands during the wait adds to the set).
      await within('calls and statements', this.settled());
      // The work of a held lease hears why it must stop: a LeaseShutdownError (503 + Retry-After), not an AbortError.
      const releases = [...this.held.values()].map((lease) =>
        this.release(lease, () => new LeaseShutdownError(lease.targetKey, 'released')),
      );
      const retried = this.retries.retryAll();
      await within('releases', Promise.all([...releases, ...retried, this.settled()]));
      this.heartbeat.stop();
      await Promise.all([this.heartbeatConnection.close(), this.waiterHeartbeatConnection.close()]);
      this.retries.clear();
      this.events.complete();
      await this.database.close().catch((error: unknown) => this.logger.warn(`Shutdown: ${String(error)}`));
    })();
    return this.closing;
  }

  /** Settles once everything in flight now, and everything added meanwhile, has settled. */
  private async settled(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.all(this.inFlight);
  }

  /** Tracks `work` for close() (see `inFlight`) and returns it unchanged. */
  private track<T>(work: Promise<T>): Promise<T> {
    const settled = work.then(
      () => undefined,
      () => undefined,
    );
    this.inFlight.add(settled);
    void settled.then(() => this.inFlight.delete(settled));
    return work;
  }

  /** Whether the lease heartbeat runs (tests, through `internal.ts`). */
  get heartbeatRunning(): boolean {
    return this.heartbeat.running;
  }

  /** Replaces the wake-up of the waiter a head-only NOTIFY names (tests, through `internal.ts`). */
  interceptHeadWakeups(onHead: (waiterId: string) => void): void {
    this.queue.onHead = onHead;
  }

  /** The lease of the surrounding `run` / `@Exclusive` call (innermost), if any. */
  current(): Lease | undefined {
    return this.context.current();
  }

  /** `LeaseService.tryAcquire`: checks the input, then a lease borrowed from the call chain or one attempt. */
  async tryAcquire(targetKey: string, options: TryAcquireOptions = {}): Promise<Lease | null> {
    const request = this.request(targetKey, options);
    const reentrant = this.context.find(request.targetKey);
    return reentrant ? new BorrowedLease(reentrant) : this.track(this.traced(request, () => this.tryOnce(request)));
  }

  /** `LeaseService.acquire`: checks the input, then a lease borrowed from the call chain, or waits in line. */
  async acquire(targetKey: string, options: AcquireOptions = {}): Promise<Lease> {
    const request = this.request(targetKey, options);
    const waitTimeoutMs = this.waitTimeoutOf(options);
    options.signal?.throwIfAborted();
    const reentrant = this.context.find(request.targetKey);
    if (reentrant) return new BorrowedLease(reentrant);
    return this.track(this.traced(request, () => this.waitFor(request, waitTimeoutMs, options.signal), options.signal));
  }

  /**
   * The acquisition half of `run`, shared by `@Exclusive` on controllers and providers: one check of the input, one
   * reentrancy lookup, then a borrowed lease (the call chain already holds the key), a wait in line (a priority or
   * waitTimeoutMs given) or one attempt (`LeaseBusyError` when refused). A signal already aborted touches nothing.
   */
  async enter(targetKey: string, options: AcquireOptions = {}): Promise<LeaseEntry> {
    const request = this.request(targetKey, options);
    const waits = options.priority !== undefined || options.waitTimeoutMs !== undefined;
    const waitTimeoutMs = waits ? this.waitTimeoutOf(options) : 0;
    options.signal?.throwIfAborted();
    const reentrant = this.context.find(request.targetKey);
    if (reentrant) return { lease: new BorrowedLease(reentrant), exit: () => Promise.resolve() };
    const lease = await this.track(
      this.traced(
        request,
        () => (waits ? this.waitFor(request, waitTimeoutMs, options.signal) : this.tryOnce(request)),
        options.signal,
      ),
    );
    if (!lease) throw new LeaseBusyError(request.targetKey, this.options.heartbeatIntervalMs);
    return { lease, exit: () => lease.release() };
  }

  /**
   * One call's acquisition in a `lease.acquire` span, child of the caller's active span (when an SDK records): its
   * outcome, fencing token and the batch its statement went in; a wait in line is its child `lease.wait`. The
   * caller's span is kept on the lease: heartbeat failures and the loss become its events.
   */
  private traced<T extends Lease | null>(
    request: LeaseRequest,
    work: () => Promise<T>,
    signal?: AbortSignal,
  ): Promise<T> {
    const holder = holderSpan();
    const span = startSpan('lease.acquire', {
      ...this.spanAttributes(request.targetKey, request.keyTemplate),
      'lease.priority': request.priority,
    });
    const started = performance.now();
    const ended = (outcome: AcquireOutcome) =>
      this.emit({
        type: 'acquire-ended',
        targetKey: request.targetKey,
        keyTemplate: request.keyTemplate,
        priority: request.priority,
        outcome,
        durationMs: performance.now() - started,
        at: new Date(),
      });
    return (span ? span.within(work) : work()).then(
      (lease) => {
        const outcome = lease instanceof HeldLease && lease.tookOver ? 'taken-over' : lease ? 'acquired' : 'busy';
        if (lease instanceof HeldLease) lease.holder = holder;
        if (lease) span?.set({ 'lease.fencing_token': String(lease.fencingToken) });
        span?.end(outcome);
        ended(outcome);
        return lease;
      },
      (error: unknown) => {
        const outcome = failureOf(error, signal);
        span?.end(outcome, outcome === 'error' || outcome === 'unavailable' ? error : undefined);
        ended(outcome);
        throw error;
      },
    );
  }

  /** The attributes every span of a lease carries: its template, and its key only when `traceTargetKeys` is on. */
  private spanAttributes(targetKey: string, keyTemplate: string): SpanAttributes {
    return { 'lease.key_template': keyTemplate, 'lease.key': this.options.traceTargetKeys ? targetKey : undefined };
  }

  /** One attempt: the lease, or null (a `busy` event) when the target is held or a live waiter is ahead. */
  private async tryOnce(request: LeaseRequest): Promise<HeldLease | null> {
    const { targetKey, priority, holdMs, keyTemplate } = request;
    const lease = await this.attempt(targetKey, priority, holdMs, undefined, undefined, keyTemplate);
    if (!lease) {
      this.emit({ type: 'busy', targetKey: request.targetKey, keyTemplate: request.keyTemplate, at: new Date() });
    }
    return lease;
  }

  /** One attempt, then the priority line until `waitTimeoutMs` (or the signal) ends the wait. */
  private async waitFor(request: LeaseRequest, waitTimeoutMs: number, signal?: AbortSignal): Promise<Lease> {
    const { targetKey, priority, holdMs, keyTemplate } = request;
    const until = performance.now() + waitTimeoutMs;
    // The first attempt queues the caller in the same statement when it is refused (one round trip less per wait).
    const waiter =
      waitTimeoutMs > 0 && this.queue.hasRoom() ? this.queue.newWaiter(targetKey, priority, holdMs, keyTemplate) : null;
    // Bounded like every attempt (a statement waiting for a locked row waits within its bound); the wait itself gives
    // up at its own deadline, and what the statement brings after that is given back (below).
    const lease = await settleBy(
      this.attempt(targetKey, priority, holdMs, undefined, waiter ? { waiter } : undefined, keyTemplate),
      until + this.queue.graceMs,
      signal,
      () => new LeaseWaitTimeoutError(targetKey, waitTimeoutMs),
      (late) => {
        if (late) void late.release();
        else if (waiter?.place) void this.store.dequeue(targetKey, waiter.id).catch(() => undefined);
      },
    );
    if (lease) return lease;
    this.emit({ type: 'waiting', targetKey, keyTemplate, priority, at: new Date() });
    const started = performance.now();
    const span = startSpan('lease.wait', {
      ...this.spanAttributes(targetKey, keyTemplate),
      'lease.priority': priority,
    });
    const inLine = waiter ?? this.queue.newWaiter(targetKey, priority, holdMs, keyTemplate);
    if (span) this.tracePosition(span, inLine);
    try {
      const wait = () => this.queue.wait(inLine, until, waitTimeoutMs, signal);
      const granted = await (span ? span.within(wait) : wait());
      this.emitWaitEnded(request, 'granted', started);
      span?.set({ 'lease.fencing_token': String(granted.fencingToken) });
      span?.end('granted');
      return granted;
    } catch (error) {
      const outcome = signal?.aborted ? 'aborted' : error instanceof LeaseWaitTimeoutError ? 'timeout' : 'error';
      this.emitWaitEnded(request, outcome, started);
      span?.end(outcome, outcome === 'error' ? error : undefined);
      throw error;
    }
  }

  /**
   * `lease.wait.position` of a traced wait: the waiter's place among the live waiters of its target (1 = granted
   * next), read with one snapshot statement in parallel with the wait — only when a span records it.
   */
  private tracePosition(span: LeaseSpan, waiter: Waiter): void {
    const seq = waiter.place?.seq;
    if (seq === undefined) return;
    const reading = this.store.snapshot(waiter.targetKey).then((rows) => {
      let position = 0;
      for (const row of rows) {
        if (row.state !== 'waiting' || row.since_heartbeat_ms >= row.timeout_ms) continue;
        position++;
        if (row.seq === String(seq)) return span.set({ 'lease.wait.position': position });
      }
    });
    void this.track(reading).catch(() => undefined);
  }

  /** Runs `work` with `lease` as the current lease of its call chain. */
  within<T>(lease: Lease, work: () => T): T {
    return this.context.run(lease, work);
  }

  /** Holders and waiters (each target's waiters in grant order), for dashboards and health checks. */
  async list(targetKey?: string): Promise<LeaseSnapshot[]> {
    const rows = await this.store.snapshot(targetKey).catch((error: unknown) => {
      throw unavailableOr(error, targetKey, targetKey === undefined ? 'list leases' : 'list the leases of');
    });
    return snapshotsOf(rows, this.options.owner);
  }

  /** Leases this process holds now (local view; no database call). */
  heldLeases(): Lease[] {
    return [...this.held.values()];
  }

  /** Number of waiting calls in this process. */
  waitingCount(): number {
    return this.queue.size;
  }

  /** The lease's `fenced()` (see `FencedTransactions`). */
  fenced<T>(lease: HeldLease, work: (manager: EntityManager) => Promise<T>): Promise<T> {
    const span = startSpan('lease.fenced', {
      ...this.spanAttributes(lease.targetKey, lease.keyTemplate),
      'lease.fencing_token': String(lease.fencingToken),
    });
    if (!span) return this.fencing.fenced(lease, work);
    return span
      .within(() => this.fencing.fenced(lease, work))
      .then(
        (result) => {
          span.end('committed');
          return result;
        },
        (error: unknown) => {
          span.end(error instanceof LeaseLostError ? 'lost' : 'error', error);
          throw error;
        },
      );
  }

  /**
   * The lease's `release()`: token-guarded; idempotent; quiet when the lease was lost. A release that fails (the
   * database unreachable, or a statement past its bound) is retried in the background until it lands, past the row's
   * expiry too (see `ReleaseRetries`): a release is idempotent, and a row left held would block its key until it
   * expires, and name this process afterwards.
   */
  async release(lease: HeldLease, reason?: () => unknown): Promise<void> {
    if (!lease.markReleased(reason)) return;
    this.forget(lease);
    const heldMs = performance.now() - (this.acquiredAt.get(lease) ?? performance.now());
    // The row expires `leaseTimeoutMs` after its last confirmed renewal, which was sent no earlier than this.
    const until = lease.deadline + this.options.safetyMarginMs;
    const span = startSpan('lease.release', {
      ...this.spanAttributes(lease.targetKey, lease.keyTemplate),
      'lease.fencing_token': String(lease.fencingToken),
      'lease.held_ms': Math.round(heldMs),
    });
    let released = false;
    const releasing = () =>
      this.retries.releaseRow(lease.targetKey, lease.token, until, () => {
        released = true;
        this.emit({
          type: 'released',
          targetKey: lease.targetKey,
          keyTemplate: lease.keyTemplate,
          fencingToken: lease.fencingToken,
          heldMs,
          at: new Date(),
        });
      });
    await (span ? span.within(releasing) : releasing());
    // Not confirmed: the statement failed (retried in the background until the row expires) or found another token.
    span?.end(released ? 'released' : 'not-confirmed');
  }

  /** One acquire statement. A refused waiter learns when a hold's tail ends (no NOTIFY marks it). */
  private attempt(
    targetKey: string,
    priority: number,
    holdMs: number,
    waiter?: Waiter,
    queueAs?: QueueAs,
    keyTemplate?: string,
  ): Promise<HeldLease | null> {
    return this.track(this.attemptOnce(targetKey, priority, holdMs, waiter, queueAs, keyTemplate));
  }

  /**
   * One acquire statement, as `waiter` when given (queued: it may pass only those behind it); `queueAs`, a call about
   * to wait, is queued by the same statement when refused (its place set on it).
   */
  private async attemptOnce(
    targetKey: string,
    priority: number,
    holdMs: number,
    waiter?: Waiter,
    queueAs?: QueueAs,
    keyTemplate = keyTemplateOf(undefined),
  ): Promise<HeldLease | null> {
    if (this.closing) throw new LeaseShutdownError(targetKey);
    const leaseToken = randomUUID();
    const request = {
      targetKey,
      leaseToken,
      priority,
      waiterId: waiter?.id,
      waiterSeq: waiter?.place?.seq,
      holdMs,
      queueAs: queueAs && { waiterId: queueAs.waiter.id },
    };
    // A database unreachable or failing is an outcome of its own (503 + Retry-After), with the pg error as cause.
    const row = await this.store.tryAcquire(request, activeSpanSetter('lease.batch_size')).catch((error: unknown) => {
      throw unavailableOr(error, targetKey, 'acquire a lease on');
    });
    if ('refused' in row) {
      if (waiter) waiter.holdLeftMs = row.holdLeftMs ?? undefined;
      if (queueAs && row.place) {
        queueAs.waiter.place = row.place;
        queueAs.waiter.holdLeftMs = row.holdLeftMs ?? undefined;
      }
      return null;
    }
    if (this.closing) {
      // Shutdown began while the statement ran: give the row back at once (close() waits for this while the pool
      // exists), and never start a heartbeat.
      await this.retries.releaseRow(targetKey, leaseToken, row.sentAt + this.options.leaseTimeoutMs);
      throw new LeaseShutdownError(targetKey);
    }
    const localLimitMs = this.options.leaseTimeoutMs - this.options.safetyMarginMs;
    if (performance.now() >= row.sentAt + localLimitMs) {
      // Granted, but answered past its local deadline (the statement ran to its bound): a lease nobody could use.
      await this.retries.releaseRow(targetKey, leaseToken, row.sentAt + this.options.leaseTimeoutMs);
      throw new LeaseUnavailableError(targetKey, messages.grantPastDeadline(localLimitMs), {
        kind: 'failing',
      });
    }
    const lease = new HeldLease(targetKey, leaseToken, row.fencingToken, row.sentAt, localLimitMs, this, (expired) =>
      this.lose(expired, 'renewal-deadline'),
    );
    lease.keyTemplate = keyTemplate;
    lease.tookOver = row.tookOver;
    this.held.set(leaseToken, lease);
    this.acquiredAt.set(lease, row.sentAt);
    this.heartbeat.start();
    const at = new Date();
    if (row.tookOver) {
      this.logger.log(
        `Took over expired lease on "${targetKey}" from ${row.previousOwner ?? 'unknown'} ` +
          `(fencing token ${row.fencingToken})`,
      );
      this.emit({
        type: 'taken-over',
        targetKey,
        keyTemplate,
        fencingToken: row.fencingToken,
        priority,
        owner: this.options.owner,
        previousOwner: row.previousOwner,
        at,
      });
    } else {
      this.emit({
        type: 'acquired',
        targetKey,
        keyTemplate,
        fencingToken: row.fencingToken,
        priority,
        owner: this.options.owner,
        at,
      });
    }
    return lease;
  }

  private lose(lease: HeldLease, reason: Exclude<LeaseLossReason, 'released'>, detail?: string): void {
    if (!lease.markLost(reason, detail)) return;
    this.forget(lease);
    const why: Record<typeof reason, string> = {
      'taken-over': 'another holder took it over',
      'renewal-deadline': 'no renewal confirmed before the safety deadline',
      failover: `the database failed over since it was acquired (${detail ?? 'another history'}); its row may be gone`,
    };
    this.logger.warn(`Lost lease on "${lease.targetKey}" (fencing token ${lease.fencingToken}): ${why[reason]}`);
    lease.holder?.event('lease.lost', { 'lease.reason': reason, 'lease.fencing_token': String(lease.fencingToken) });
    this.emit({
      type: 'lost',
      targetKey: lease.targetKey,
      keyTemplate: lease.keyTemplate,
      fencingToken: lease.fencingToken,
      reason,
      heldMs: performance.now() - (this.acquiredAt.get(lease) ?? performance.now()),
      at: new Date(),
    });
  }

  private forget(lease: HeldLease): void {
    this.held.delete(lease.token);
  }

  /** The one check of a call's key, priority and hold (`LeaseKeyError` / argument errors). */
  private request(targetKey: unknown, options: TryAcquireOptions): LeaseRequest {
    assertTargetKey(targetKey);
    if (options.priority !== undefined) assertPriority(options.priority);
    assertHoldAtLeastMs(options.holdAtLeastMs);
    const keyTemplate = keyTemplateOf(options.keyTemplate);
    return { targetKey, priority: options.priority ?? 0, holdMs: options.holdAtLeastMs ?? 0, keyTemplate };
  }

  private waitTimeoutOf(options: AcquireOptions): number {
    const waitTimeoutMs = options.waitTimeoutMs ?? this.options.defaultWaitTimeoutMs;
    checkCall('waitTimeoutMs', waitTimeoutMs);
    return waitTimeoutMs;
  }

  private emitWaitEnded(
    { targetKey, keyTemplate, priority }: LeaseRequest,
    outcome: 'granted' | 'timeout' | 'aborted' | 'error',
    started: number,
  ): void {
    this.emit({
      type: 'wait-ended',
      targetKey,
      keyTemplate,
      priority,
      outcome,
      waitedMs: performance.now() - started,
      at: new Date(),
    });
  }

  private emit(event: LeaseEvent): void {
    publish(event);
    if (!this.events.closed) this.events.next(event);
  }
}

/** The `lease.outcome` of an acquisition that failed. */
function failureOf(error: unknown, signal?: AbortSignal): AcquireOutcome {
  if (signal?.aborted) return 'aborted';
  if (error instanceof LeaseWaitTimeoutError) return 'timeout';
  if (error instanceof LeaseQueueFullError) return 'queue-full';
  if (error instanceof LeaseShutdownError) return 'shutdown';
  if (error instanceof LeaseUnavailableError) return 'unavailable';
  return 'error';
}
