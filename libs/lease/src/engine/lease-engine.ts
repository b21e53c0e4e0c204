import { randomUUID } from 'node:crypto';
import { type BeforeApplicationShutdown, Logger, type OnModuleInit } from '@nestjs/common';
import { type Observable, Subject } from 'rxjs';
import type { DataSource, EntityManager } from 'typeorm';
import { FencedTransactions } from './fenced-transaction.js';
import { JoinRuns } from './join-runs.js';
import { LeaseHeartbeat } from './lease-heartbeat.js';
import { snapshotsOf } from './lease-snapshot.js';
import { grantedEvent, lostEvent, releasedEvent } from './lease-events.js';
import { LeaseTelemetry } from './lease-telemetry.js';
import { OperatorHooks } from './operator-hooks.js';
import { Preemption } from './preemption.js';
import { PurgeSchedule } from './purge-schedule.js';
import { ReleaseRetries } from './release-retries.js';
import { ShutdownDrain } from './shutdown-drain.js';
import { unavailableOr } from '../errors/database-errors.js';
import { messages } from '../errors/lease.messages.js';
import { LeaseShutdownError, LeaseUnavailableError, LeaseWaitTimeoutError } from '../errors/lease.errors.js';
import type { LeaseLossReason } from '../interfaces/lease-loss-reason.interface.js';
import { closeStepMs } from '../options/bounds.js';
import type { FencedOptions, Lease } from '../interfaces/lease.interface.js';
import { BorrowedLease, HeldLease, type LeaseHandleOwner } from './held-lease.js';
import { LeaseContext } from './lease-context.js';
import type { LeaseModuleOptions } from '../interfaces/lease-module-options.interface.js';
import type { EngineSettings } from '../options/engine-settings.js';
import { resolveLeaseOptions } from '../options/resolve-lease-options.js';
import type { LeaseEvent, LeaseEventType, LeaseSnapshot } from '../interfaces/lease-event.interface.js';
import { keyTemplateOf, type LeaseRequest } from '../options/call-input.js';
import { type LeaseCall, preemptGraceOf, waitBoundMs, type WaitingPlan } from '../options/busy-policy.js';
import { channelHeard, publish } from '../observability/diagnostics.js';
import { activeSpanSetter, loadTracing, tracing } from '../observability/tracing.js';
import { boundedStep, settleBy } from '../util/settle-by.js';
import { confirmGrant, type Waiter, WaitQueue } from './wait-queue.js';
import { Parking } from './parked-places.js';
import { acquireSlot, busyError, markSlot, rowOf, WaiterLimits } from './acquisition-route.js';
import { RetryAfterEstimates } from './retry-after.js';
import type { LeaseEntry, ServiceEngine } from './service-engine.js';
import type { AcquiredRow, BackendFactory, LeaseBackend } from '../core/backend.js';
import { backendFor, type LeaseDataSourceRef } from '../core/postgres/postgres-backend.js';

/** What a failing acquisition could not do (its `LeaseUnavailableError`'s message). */
const ACQUIRE = 'acquire a lease on';

/**
 * The one engine behind every door (`LeaseService`'s methods, `@Exclusive` on controllers and on providers):
 * acquires leases with one statement, renews all of this process's leases with one batched heartbeat, aborts a
 * lease's signal when it is lost, fences writes, and releases. Internal: `LeaseService` is its public face; the doors
 * (exclusive-call, the explorer) use it directly for `enter` / `within`. Nest runs its lifecycle hooks.
 */
export class LeaseEngine implements ServiceEngine, LeaseHandleOwner, OnModuleInit, BeforeApplicationShutdown {
  /** acquired, taken-over, renewed, renew-failed, lost, released, busy, waiting, wait-ended. */
  readonly events$: Observable<LeaseEvent>;
  /** The resolved options (defaults applied). */
  readonly options: EngineSettings;
  private readonly joins: JoinRuns;
  private readonly preemption: Preemption;
  // Named after the public class: that is the name users know from the log lines.
  private readonly logger = new Logger('LeaseService');
  private readonly events = new Subject<LeaseEvent>();
  /** Where the rows live (PostgreSQL, or the testing kit's memory). */
  readonly backend: LeaseBackend;
  private readonly context = new LeaseContext();
  private readonly held = new Map<string, HeldLease>();
  private readonly drain = new ShutdownDrain(this.held, this.logger);
  /**
   * What close() waits for, each settled (never rejecting): calls in flight (acquiring or waiting), acquire statements
   * in flight (one a call gave up on may still land), releases in flight.
   */
  private readonly inFlight = new Set<Promise<void>>();
  private readonly limits = new WaiterLimits();
  /** The priority line of this process (its head wake-ups and park window: tests, through `internal.ts`). */
  readonly queue: WaitQueue;
  private closing?: Promise<void>;
  /** The batched lease heartbeat (`running`: tests, through `internal.ts`). */
  readonly heartbeat: LeaseHeartbeat;
  readonly fencing: FencedTransactions;
  private readonly retries: ReleaseRetries;
  /** The purge of free rows (`now()`: tests, through `internal.ts`). */
  readonly purges: PurgeSchedule;
  private readonly telemetry: LeaseTelemetry;
  /** Drains and the journal (the operator's console); `LeaseOperator` uses them. */
  readonly operator: OperatorHooks;
  /** When a refused caller may retry (`LeaseBusyError.retryAfterMs`), from this engine's events and refusals. */
  private readonly estimates: RetryAfterEstimates;
  /** The hot key's re-queue riding on its release (see parked-places.ts). */
  private readonly parking: Parking;

  /** Over PostgreSQL (a DataSource, or the module's reference to one), or over the backend `source` builds. */
  constructor(source: DataSource | LeaseDataSourceRef | BackendFactory, options: LeaseModuleOptions = {}) {
    this.options = resolveLeaseOptions(options);
    this.estimates = new RetryAfterEstimates(this.options.leaseTimeoutMs, this.held);
    const track = <T>(work: Promise<T>) => this.track(work);
    void loadTracing();
    this.backend = backendFor(source, this.options, this.logger);
    this.events$ = this.events.asObservable();
    this.queue = new WaitQueue(
      this.backend,
      this.options,
      (waiter) => this.preemption.attempt(waiter, () => this.attempt(this.limits.requestOf(waiter), { waiter })),
      this.logger,
      ({ targetKey, keyTemplate, holdAtLeastMs: holdMs }) =>
        this.estimates.estimate({ targetKey, keyTemplate: keyTemplateOf(keyTemplate), holdMs }),
    );
    this.preemption = new Preemption(this.backend.preempt, this.options.owner, {
      held: this.held,
      lose: (lease, reason) => this.lose(lease, reason),
      emit: (event) => this.emit(event),
      adopt: (request, leaseToken, row) => this.track(this.adopt(request, leaseToken, row)),
    });
    this.joins = new JoinRuns(this, this.backend.joins);
    this.telemetry = new LeaseTelemetry(this.options, this.backend, (event) => this.emit(event), track);
    const closing = () => this.closing !== undefined;
    this.purges = new PurgeSchedule(this.backend, this.logger, track, closing);
    const lose = this.lose.bind(this);
    const settleAgain = () => void this.track(this.backend.settleAgain());
    this.heartbeat = new LeaseHeartbeat(this.backend, this.options, this.logger, this.held, lose, this, settleAgain);
    const releasedBySave = (lease: HeldLease) => void this.release(lease, undefined, true);
    this.fencing = new FencedTransactions(this.backend.fence, lose, releasedBySave);
    this.operator = new OperatorHooks(this.backend.operator, this.options, this.logger, this.events$, track);
    this.retries = new ReleaseRetries(this.backend, this.options, this.logger, track, () => this.drain.ended);
    this.parking = new Parking(this.queue.parked, this.backend, this.retries, this.operator.drains, track, closing);
  }

  /** Checks the DataSource and the tables (creating them when `createSchema` is set). Nest calls it at bootstrap. */
  async init(): Promise<void> {
    const [systemId] = await Promise.all([this.backend.open(), loadTracing()]);
    this.heartbeat.systemId = systemId;
    await this.operator.start();
    this.purges.start();
  }

  async onModuleInit(): Promise<void> {
    await this.init();
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.close();
  }

  /**
   * Refuses new calls, cancels every wait and removes its row, waits for calls and statements in flight (one landing
   * meanwhile gives its row back itself: see `attempt`), drains (see `ShutdownDrain`), then aborts and releases what is
   * still held. Idempotent. Bounded: `shutdownGraceMs`, then `closeStepMs` per step, whatever the network does; once
   * it resolves the process holds no connection of the library's and (the database answering) no live row.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.purges.stop();
      const stepMs = closeStepMs(this.options);
      const within = (what: string, work: Promise<unknown>) =>
        boundedStep(what, work, stepMs, (message) => this.logger.warn(message));
      await within('waits', Promise.all([this.queue.close(), this.joins.close()]));
      // Calls and statements in flight (settled promises; what lands during the wait adds to the set).
      await within('calls and statements', this.settled());
      await this.drain.wait(this.options.shutdownGraceMs);
      // The work of a held lease hears why it must stop: a LeaseShutdownError (503 + Retry-After), not an AbortError.
      const releases = [...this.held.values()].map((lease) =>
        this.release(lease, () => new LeaseShutdownError(lease.targetKey, 'released')),
      );
      const retried = this.retries.retryAll();
      await within('releases', Promise.all([...releases, ...retried, this.settled()]));
      this.heartbeat.stop();
      await this.backend.closeHeartbeats();
      this.retries.clear();
      await this.operator.stop();
      this.events.complete();
      await this.backend.close().catch((error: unknown) => this.logger.warn(`Shutdown: ${String(error)}`));
    })();
    return this.closing;
  }

  /** Settles once everything in flight now, and everything added meanwhile, has settled. */
  private async settled(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.all(this.inFlight);
  }

  /** Tracks `work` for close() (see `inFlight`; it leaves the set as it settles) and returns it unchanged. */
  private track<T>(work: Promise<T>): Promise<T> {
    const done = () => void this.inFlight.delete(settled);
    const settled: Promise<void> = work.then(done, done);
    this.inFlight.add(settled);
    return work;
  }

  /** One renewal of the held leases now (the testing kit's controls: a loss is heard at once). */
  renewNow(): Promise<void> {
    return this.heartbeat.renewNow();
  }

  /** The lease of the surrounding `run` / `@Exclusive` call (innermost), if any. */
  current(): Lease | undefined {
    return this.context.current();
  }

  /** `LeaseService.tryAcquire`: a lease borrowed from the call chain or one attempt. */
  async tryAcquire(request: LeaseRequest): Promise<Lease | null> {
    const reentrant = this.context.find(request.targetKey);
    return reentrant ? new BorrowedLease(reentrant, request) : this.acquiring(request, () => this.tryOnce(request));
  }

  /** `LeaseService.acquire`: a lease borrowed from the call chain, or a wait in line (or a preemption). */
  async acquire(call: LeaseCall<WaitingPlan>): Promise<Lease> {
    const { request, busy, signal } = call;
    const waitTimeoutMs = waitBoundMs(busy, this.options);
    const graceMs = preemptGraceOf(busy, this.options);
    signal?.throwIfAborted();
    const reentrant = this.context.find(request.targetKey);
    if (reentrant) return new BorrowedLease(reentrant, request);
    return this.acquiring(request, () => this.waitFor(request, waitTimeoutMs, signal, graceMs), signal);
  }

  /** An acquisition, tracked for close() and traced; no database failure in it rejects as a driver's error. */
  private acquiring<T extends Lease | null>(request: LeaseRequest, work: () => Promise<T>, signal?: AbortSignal) {
    const classified = () =>
      work().catch((error: unknown) => {
        throw signal?.aborted && error === signal.reason ? error : unavailableOr(error, request.targetKey, ACQUIRE);
      });
    // Telemetry only when someone records a span or hears `acquire-ended` (checked without a call into it).
    const traced = tracing();
    const timed = this.events.observed || this.telemetry.acquireEnded.hasSubscribers;
    return this.track(
      traced || timed ? this.telemetry.acquire(request, classified, signal, { traced, timed }) : classified(),
    );
  }

  /**
   * The acquisition half of `run`, shared by `@Exclusive` on controllers and providers: one reentrancy lookup, then a
   * borrowed lease (the call chain already holds the key), a wait in line (`'wait'`, `'preempt'`) or one attempt
   * (`LeaseBusyError` when refused). A signal already aborted touches nothing.
   */
  async enter(call: LeaseCall): Promise<LeaseEntry> {
    const { request, busy, signal } = call;
    signal?.throwIfAborted();
    const reentrant = this.context.find(request.targetKey);
    if (reentrant) return { lease: new BorrowedLease(reentrant, request), exit: () => Promise.resolve() };
    const lease = await this.acquiring(
      request,
      () =>
        // `waits(busy)`, spelled out: the lone call's path makes no call for its policy.
        busy.kind === 'wait' || busy.kind === 'preempt'
          ? this.waitFor(request, waitBoundMs(busy, this.options), signal, preemptGraceOf(busy, this.options))
          : this.tryOnce(request),
      signal,
    );
    if (!lease) throw busyError(request.targetKey, request.limit, this.estimates.answer(request, call.retryAfter));
    return { lease, exit: () => lease.release() };
  }

  /** One attempt: the lease, or null (a `busy` event) when the target is held or a live waiter is ahead. */
  private async tryOnce(request: LeaseRequest): Promise<HeldLease | null> {
    // Not tracked on its own: the call (`acquiring`) is, and nothing gives up on this statement before it returns.
    const lease = await this.attemptOnce(request, {});
    if (!lease && this.hears('busy')) {
      this.emit({ type: 'busy', targetKey: request.targetKey, keyTemplate: request.keyTemplate, at: new Date() });
    }
    return lease;
  }

  /**
   * One attempt, then the priority line until `waitTimeoutMs` (or the signal) ends the wait; with `graceMs`, a
   * preempting call (see `Preemption`).
   */
  private async waitFor(
    request: LeaseRequest,
    waitTimeoutMs: number,
    signal?: AbortSignal,
    graceMs?: number,
  ): Promise<Lease> {
    const { targetKey } = request;
    const until = performance.now() + waitTimeoutMs;
    // The first attempt queues the caller in the same statement when it is refused (one round trip less per wait);
    // a slot's does not (a semaphore's waiter queues on its own, see semaphore.ts).
    const queues = waitTimeoutMs > 0 && request.limit === 1;
    // A hot key's call takes over the place its process's release queued, if any: no statement (parked-places.ts).
    const adopted = queues && graceMs === undefined ? this.parking.adopt(request) : null;
    if (adopted) return this.waitAs(adopted, request, until, waitTimeoutMs, signal);
    const waiter = queues ? this.queue.reserve(request) : null;
    if (waiter && graceMs !== undefined) this.preemption.track(waiter, request, graceMs);
    const first = () => this.attempt(request, { queueAs: waiter ?? undefined });
    // Bounded like every attempt (a statement waiting for a locked row waits within its bound); the wait itself gives
    // up at its own deadline, and what the statement brings after that is given back (below).
    const lease = await settleBy(
      waiter ? this.preemption.attempt(waiter, first) : first(),
      until + this.queue.graceMs,
      signal,
      () => new LeaseWaitTimeoutError(targetKey, waitTimeoutMs),
      (late) => {
        if (late) void late.release();
        // Tracked: a close() beside an abort (a leader candidate's stop) waits for the row to go.
        else if (waiter?.place) void this.track(this.queue.leave(waiter));
      },
    ).catch((error: unknown) => {
      if (waiter) this.queue.unreserve(waiter);
      throw error;
    });
    if (lease) {
      if (waiter) this.queue.unreserve(waiter);
      return lease;
    }
    const inLine = waiter ?? this.limits.note(this.queue.newWaiter(request), request.limit);
    if (!waiter && graceMs !== undefined) this.preemption.track(inLine, request, graceMs);
    return this.waitAs(inLine, request, until, waitTimeoutMs, signal);
  }

  /** The wait in line of `waiter` (a `waiting` event, then `WaitQueue.wait`, traced). */
  private waitAs(waiter: Waiter, request: LeaseRequest, until: number, waitTimeoutMs: number, signal?: AbortSignal) {
    const { targetKey, keyTemplate, priority } = request;
    if (this.hears('waiting')) this.emit({ type: 'waiting', targetKey, keyTemplate, priority, at: new Date() });
    return this.telemetry.wait(request, waiter, () => this.queue.wait(waiter, until, waitTimeoutMs, signal), signal);
  }

  /** Runs `work` with `lease` as the current lease of its call chain. */
  within<T>(lease: Lease, work: () => T): T {
    return this.context.run(lease, work);
  }

  borrow(targetKey: string): Lease | undefined {
    const held = this.context.find(targetKey);
    return held && new BorrowedLease(held);
  }

  /** Calls of `targetKey` waiting for another run's outcome (`onBusy: 'join'`): a probe for tests. */
  joinersOf(targetKey: string): number {
    return this.joins.joinersOf(targetKey);
  }

  joinRun<T>(call: LeaseCall, work: (lease: Lease) => Promise<T> | T): Promise<T> {
    return this.joins.run(call, work);
  }

  /** Whether the call chain holds `targetKey` already (`JoinHost`): a join there is reentrant. */
  holdsInChain(targetKey: string): boolean {
    return this.context.find(targetKey) !== undefined;
  }

  /** Holders and waiters (each target's waiters in grant order), for dashboards and health checks. */
  async list(targetKey?: string): Promise<LeaseSnapshot[]> {
    const rows = await this.backend.snapshot(targetKey).catch((error: unknown) => {
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
  fenced<T>(lease: HeldLease, work: (manager: EntityManager) => Promise<T>, options?: FencedOptions): Promise<T> {
    return this.telemetry.fenced(lease, () => this.fencing.fenced(lease, work, options));
  }

  /**
   * The lease's `release()`: token-guarded; idempotent; quiet when the lease was lost. A release that fails (the
   * database unreachable, or a statement past its bound) is retried in the background until it lands, past the row's
   * expiry too (see `ReleaseRetries`): a release is idempotent, and a row left held would block its key until it
   * expires, and name this process afterwards. `committed`: the row was released by a fenced transaction's commit
   * (`fenced(work, { release: true })`), so no statement is sent.
   */
  async release(lease: HeldLease, reason?: () => unknown, committed = false): Promise<void> {
    if (!lease.markReleased(reason)) return;
    this.forget(lease);
    const heldMs = performance.now() - lease.acquiredAt;
    // The row expires `leaseTimeoutMs` after its last confirmed renewal, which was sent no earlier than this.
    const until = lease.deadline + this.options.safetyMarginMs;
    await this.telemetry.release(lease, heldMs, async () => {
      let released = false;
      const onReleased = () => {
        released = true;
        this.estimates.released(lease.targetKey, lease.keyTemplate, heldMs);
        if (this.hears('released')) this.emit(releasedEvent(lease, heldMs));
      };
      // A hot key's release may queue this process again in its own statement (see parked-places.ts).
      const parking = committed ? null : this.parking.release(lease, until, onReleased);
      if (committed) onReleased();
      else await (parking ?? this.retries.releaseRow(lease.row, lease.token, until, onReleased, lease.lone));
      return released;
    });
  }

  /** One acquire statement, tracked for close(). A refused waiter learns when a hold's tail ends (no NOTIFY marks it). */
  private attempt(request: LeaseRequest, as: { waiter?: Waiter; queueAs?: Waiter } = {}): Promise<HeldLease | null> {
    return this.track(this.attemptOnce(request, as));
  }

  /**
   * One acquire statement, as `waiter` when given (queued: it may pass only those behind it); `queueAs`, a call about
   * to wait, is queued by the same statement when refused (its place set on it).
   */
  private async attemptOnce(
    { targetKey, priority, holdMs, keyTemplate, limit, leaseTimeoutMs }: LeaseRequest,
    { waiter, queueAs }: { waiter?: Waiter; queueAs?: Waiter },
  ): Promise<HeldLease | null> {
    if (this.closing) throw new LeaseShutdownError(targetKey);
    // A drained key or template is refused; the drains are read first only after a quiet spell (drain-cache.ts).
    if (this.operator.drains.current) this.operator.drains.attempted = true;
    else await this.operator.drains.ready();
    if (this.operator.drains.active) this.operator.drains.check(targetKey, keyTemplate);
    // A waiter's lease token is its id: a release can hand it a grant it recognises (direct handoff).
    const leaseToken = waiter?.id ?? randomUUID();
    const request = {
      targetKey,
      leaseToken,
      priority,
      waiterId: waiter?.id,
      waiterSeq: waiter?.place?.seq,
      holdMs,
      leaseTimeoutMs,
      queueAs: queueAs && { waiterId: queueAs.id },
    };
    // A database unreachable or failing is an outcome of its own (503 + Retry-After), with the pg error as cause.
    const row = await (
      waiter?.granted === undefined
        ? limit === 1
          ? this.backend.attempt(request, activeSpanSetter('lease.batch_size'))
          : acquireSlot(this.backend, request, limit, activeSpanSetter('lease.batch_size'))
        : confirmGrant(this.backend, waiter, holdMs)
    ).catch((error: unknown) => {
      throw unavailableOr(error, targetKey, ACQUIRE);
    });
    if ('refused' in row) {
      this.estimates.refused(targetKey, row.holdLeftMs);
      if (waiter) waiter.holdLeftMs = row.holdLeftMs ?? undefined;
      if (queueAs && row.place) {
        Object.assign(queueAs, { place: row.place, holdLeftMs: row.holdLeftMs ?? undefined, queuedBehind: row.behind });
      }
      return null;
    }
    const call = { targetKey, priority, holdMs, keyTemplate, limit, leaseTimeoutMs };
    return this.adopt(call, leaseToken, row, waiter !== undefined);
  }

  /** The lease of a grant (`throughLine`: to a waiter): given back at shutdown or past its deadline; else held. */
  private async adopt(request: LeaseRequest, leaseToken: string, row: AcquiredRow, throughLine = false) {
    const { targetKey, priority, keyTemplate } = request;
    const leaseTimeoutMs = request.leaseTimeoutMs ?? this.options.leaseTimeoutMs; // its row's (see lease-timeout.ts)
    if (this.closing) {
      // Shutdown began while the statement ran: give the row back at once (close() waits for this while the pool
      // exists), and never start a heartbeat.
      await this.retries.releaseRow(rowOf(row, targetKey), leaseToken, row.sentAt + leaseTimeoutMs);
      throw new LeaseShutdownError(targetKey);
    }
    const localLimitMs = leaseTimeoutMs - this.options.safetyMarginMs;
    if (performance.now() >= row.sentAt + localLimitMs) {
      // Granted, but answered past its local deadline (the statement ran to its bound): a lease nobody could use.
      await this.retries.releaseRow(rowOf(row, targetKey), leaseToken, row.sentAt + leaseTimeoutMs);
      throw new LeaseUnavailableError(targetKey, messages.grantPastDeadline(localLimitMs), { kind: 'failing' });
    }
    const lease = new HeldLease(targetKey, leaseToken, row.fencingToken, row.sentAt, localLimitMs, this, (expired) =>
      this.lose(expired, 'renewal-deadline'),
    );
    lease.keyTemplate = keyTemplate;
    lease.leaseTimeoutMs = leaseTimeoutMs;
    lease.tookOver = row.tookOver;
    lease.lone = row.lone === true;
    lease.throughLine = throughLine;
    markSlot(lease, row, request.limit);
    this.held.set(leaseToken, lease);
    this.heartbeat.start();
    this.estimates.granted(targetKey);
    if (!row.tookOver) {
      if (this.hears('acquired')) this.emit(grantedEvent(lease, priority, this.options.owner));
      return lease;
    }
    const from = row.previousOwner ?? 'unknown';
    this.logger.log(`Took over expired lease on "${targetKey}" from ${from} (fencing token ${row.fencingToken})`);
    if (this.hears('taken-over')) this.emit(grantedEvent(lease, priority, this.options.owner, row));
    return lease;
  }

  private lose(lease: HeldLease, reason: Exclude<LeaseLossReason, 'released'>, detail?: string): void {
    if (!lease.markLost(reason, detail)) return;
    this.forget(lease);
    this.logger.warn(messages.leaseLost(lease.targetKey, lease.fencingToken, reason, detail));
    lease.holder?.event('lease.lost', { 'lease.reason': reason, 'lease.fencing_token': String(lease.fencingToken) });
    if (this.hears('lost')) this.emit(lostEvent(lease, reason, performance.now() - lease.acquiredAt));
  }

  private forget(lease: HeldLease): void {
    this.held.delete(lease.token);
    this.drain.forgotten();
  }

  /** Whether `events$` or the diagnostics channel of `type` has a listener: events are built only then. */
  hears(type: LeaseEventType): boolean {
    return this.events.observed || channelHeard(type);
  }

  /** Hands `event` to its listeners (callers ask `hears` first). */
  emit(event: LeaseEvent): void {
    publish(event);
    if (!this.events.closed) this.events.next(event);
  }
}
