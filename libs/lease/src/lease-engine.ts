import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { type BeforeApplicationShutdown, Logger, type OnModuleInit } from '@nestjs/common';
import { type Observable, Subject, type Subscription } from 'rxjs';
import type { DataSource, EntityManager } from 'typeorm';
import {
  LeaseArgumentError,
  LeaseBusyError,
  LeaseConfigError,
  type LeaseLossReason,
  LeaseLostError,
  LeaseShutdownError,
  LeaseUnavailableError,
  LeaseWaitTimeoutError,
  errorText,
  messages,
  unavailableOr,
} from './errors.js';
import { batchedHeartbeat, type HeartbeatTick } from './heartbeat.js';
import { closeStepMs, connectBoundMs, connectionCloseMs, shortBoundMs } from './lease-bounds.js';
import { BorrowedLease, HeldLease, type Lease, type LeaseHandleOwner } from './lease.js';
import { LeaseDatabase, type LeaseDataSourceRef } from './lease-database.js';
import { LeaseContext } from './lease-context.js';
import { type LeaseModuleOptions, type ResolvedLeaseOptions, resolveLeaseOptions } from './lease.options.js';
import {
  grantStatements,
  isSerializationFailure,
  LeaseStore,
  type RenewResult,
  type ServerHistory,
  timelineOf,
} from './lease-store.js';
import { DedicatedConnection } from './dedicated-connection.js';
import type { AcquireOptions, LeaseEvent, LeaseSnapshot, TryAcquireOptions } from './lease.types.js';
import { assertHoldAtLeastMs, assertPriority, assertTargetKey } from './target-key.js';
import { settleBy } from './settle-by.js';
import { type Waiter, WaitQueue } from './wait-queue.js';

/** A fenced transaction open in the current call chain: nested `fenced()` calls on its lease join it. */
interface OpenFence {
  readonly manager: EntityManager;
  /** Nested parts run one at a time (each in a savepoint on the one connection). */
  queue: Promise<unknown>;
  closed: boolean;
}

/** A call about to wait, queued by its first attempt when refused. */
interface QueueAs {
  readonly waiter: Waiter;
}

/** A release that failed, retried until it lands or its lease would have expired anyway (see `release`). */
interface Unreleased {
  readonly targetKey: string;
  readonly token: string;
  /** Monotonic time after which the row has expired by itself (no need to go on). */
  readonly until: number;
  delayMs: number;
  timer?: NodeJS.Timeout;
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
  private readonly fences = new AsyncLocalStorage<ReadonlyMap<HeldLease, OpenFence>>();
  private readonly held = new Map<string, HeldLease>();
  /**
   * What close() waits for, each settled (never rejecting): calls in flight (acquiring or waiting), acquire statements
   * in flight (one a call gave up on may still land), releases in flight.
   */
  private readonly inFlight = new Set<Promise<void>>();
  /** Releases that failed and are retried (by lease token). */
  private readonly unreleased = new Map<string, Unreleased>();
  private readonly acquiredAt = new WeakMap<HeldLease, number>();
  private readonly queue: WaitQueue;
  private readonly heartbeatConnection: DedicatedConnection;
  private readonly waiterHeartbeatConnection: DedicatedConnection;
  private heartbeat?: Subscription;
  private closing?: Promise<void>;
  private readonly database: LeaseDatabase;
  /**
   * The system identifier of the database cluster this process acquires leases in (null: not readable by the role).
   * Each lease's timeline is in its fencing token; together they are the history a renewal checks.
   */
  private systemId: string | null = null;
  /** What the last renewal that found another history said about it, for the loss messages. */
  private failoverDetail?: string;

  constructor(dataSource: DataSource | LeaseDataSourceRef, options: LeaseModuleOptions = {}) {
    this.options = resolveLeaseOptions(options);
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
      (waiter) => this.attempt(waiter.targetKey, waiter.priority, waiter.holdAtLeastMs, waiter),
      this.logger,
    );
  }

  /** Checks the DataSource and the tables (creating them when `createSchema` is set). Nest calls it at bootstrap. */
  async init(): Promise<void> {
    await this.database.open();
    if (this.options.pooler === 'transaction' && !this.options.sessionUrl) {
      this.logger.warn(
        "pooler: 'transaction' without sessionUrl: heartbeats go through the pooler (a saturated pooler can delay " +
          'them past the lease timeout) and LISTEN/NOTIFY is off (waiters poll every ' +
          `${this.options.waitPollIntervalMs} ms); give sessionUrl, a direct or session-mode connection string, ` +
          'for both',
      );
    }
    if (this.options.createSchema) await this.createSchema();
    const missing = await this.store.missingObjects();
    if (missing.length > 0) {
      throw new LeaseConfigError(
        `Lease tables are missing (${missing.join(', ')}): add leaseMigrations to your DataSource's migrations and ` +
          'run them, or set createSchema: true',
      );
    }
    await this.checkPrivileges();
    this.systemId = (await this.store.serverHistory()).systemId;
  }

  /**
   * `createSchema`: creates the objects only when some are missing — `CREATE … IF NOT EXISTS` still needs the CREATE
   * right — so a least-privileged role starts fine where the owner ran the migrations.
   */
  private async createSchema(): Promise<void> {
    if ((await this.store.missingObjects()).length === 0) return;
    const { role, allowed } = await this.store.mayCreateSchema();
    if (!allowed) {
      throw new LeaseConfigError(
        `createSchema: the lease tables are missing and the role "${role}" lacks CREATE on schema ` +
          `"${this.options.schema}": run leaseMigrations as the schema's owner and grant this role the rights listed ` +
          'in the README ("Database privileges"), or grant it CREATE on the schema',
      );
    }
    await this.store.createSchema();
  }

  /** A role missing a right would fail later, statement by statement: name every missing right at bootstrap. */
  private async checkPrivileges(): Promise<void> {
    const { role, missing } = await this.store.missingPrivileges();
    if (missing.length === 0) return;
    throw new LeaseConfigError(
      `The database role "${role}" lacks rights nest-pg-lease needs: ${missing.join(', ')}. ` +
        `As the owner of the lease tables, run: ${grantStatements(this.options, role).join('; ')}`,
    );
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
      const releases = [...this.held.values()].map((lease) => this.release(lease));
      const retried = [...this.unreleased.values()].map((entry) => this.retryNow(entry));
      await within('releases', Promise.all([...releases, ...retried, this.settled()]));
      this.stopHeartbeat();
      await Promise.all([this.heartbeatConnection.close(), this.waiterHeartbeatConnection.close()]);
      for (const entry of this.unreleased.values()) clearTimeout(entry.timer);
      this.unreleased.clear();
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

  /** The lease of the surrounding `run` / `@Exclusive` call (innermost), if any. */
  current(): Lease | undefined {
    return this.context.current();
  }

  /** `LeaseService.tryAcquire`: checks the input, then a lease borrowed from the call chain or one attempt. */
  async tryAcquire(targetKey: string, options: TryAcquireOptions = {}): Promise<Lease | null> {
    const request = this.request(targetKey, options);
    const reentrant = this.context.find(request.targetKey);
    return reentrant ? new BorrowedLease(reentrant) : this.track(this.tryOnce(request));
  }

  /** `LeaseService.acquire`: checks the input, then a lease borrowed from the call chain, or waits in line. */
  async acquire(targetKey: string, options: AcquireOptions = {}): Promise<Lease> {
    const request = this.request(targetKey, options);
    const waitTimeoutMs = this.waitTimeoutOf(options);
    options.signal?.throwIfAborted();
    const reentrant = this.context.find(request.targetKey);
    return reentrant ? new BorrowedLease(reentrant) : this.track(this.waitFor(request, waitTimeoutMs, options.signal));
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
      waits ? this.waitFor(request, waitTimeoutMs, options.signal) : this.tryOnce(request),
    );
    if (!lease) throw new LeaseBusyError(request.targetKey, this.options.heartbeatIntervalMs);
    return { lease, exit: () => lease.release() };
  }

  /** One attempt: the lease, or null (a `busy` event) when the target is held or a live waiter is ahead. */
  private async tryOnce(request: LeaseRequest): Promise<HeldLease | null> {
    const lease = await this.attempt(request.targetKey, request.priority, request.holdMs);
    if (!lease) this.emit({ type: 'busy', targetKey: request.targetKey, at: new Date() });
    return lease;
  }

  /** One attempt, then the priority line until `waitTimeoutMs` (or the signal) ends the wait. */
  private async waitFor(request: LeaseRequest, waitTimeoutMs: number, signal?: AbortSignal): Promise<Lease> {
    const { targetKey, priority, holdMs } = request;
    const until = performance.now() + waitTimeoutMs;
    // The first attempt queues the caller in the same statement when it is refused (one round trip less per wait).
    const waiter = waitTimeoutMs > 0 && this.queue.hasRoom() ? this.queue.newWaiter(targetKey, priority, holdMs) : null;
    // Bounded like every attempt (a statement waiting for a locked row waits within its bound); the wait itself gives
    // up at its own deadline, and what the statement brings after that is given back (below).
    const lease = await settleBy(
      this.attempt(targetKey, priority, holdMs, undefined, waiter ? { waiter } : undefined),
      until + this.queue.graceMs,
      signal,
      () => new LeaseWaitTimeoutError(targetKey, waitTimeoutMs),
      (late) => {
        if (late) void late.release();
        else if (waiter?.place) void this.store.dequeue(targetKey, waiter.id).catch(() => undefined);
      },
    );
    if (lease) return lease;
    this.emit({ type: 'waiting', targetKey, priority, at: new Date() });
    const started = performance.now();
    try {
      const granted = await this.queue.wait(
        waiter ?? this.queue.newWaiter(targetKey, priority, holdMs),
        until,
        waitTimeoutMs,
        signal,
      );
      this.emitWaitEnded(targetKey, priority, 'granted', started);
      return granted;
    } catch (error) {
      const outcome = signal?.aborted ? 'aborted' : error instanceof LeaseWaitTimeoutError ? 'timeout' : 'error';
      this.emitWaitEnded(targetKey, priority, outcome, started);
      throw error;
    }
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
    const positions = new Map<string, number>();
    return rows.map((row) => {
      const live = row.since_heartbeat_ms < row.timeout_ms;
      const snapshot: LeaseSnapshot = {
        targetKey: row.target_id,
        state: row.state,
        owner: row.owner,
        mine: row.owner === this.options.owner,
        priority: row.priority,
        effectivePriority: Number(row.effective_priority),
        ageMs: Math.round(row.age_ms),
        sinceHeartbeatMs: Math.round(row.since_heartbeat_ms),
        timeoutMs: row.timeout_ms,
        live,
      };
      if (row.fencing_token !== null) snapshot.fencingToken = BigInt(row.fencing_token);
      if (row.state === 'waiting' && live) {
        const position = (positions.get(row.target_id) ?? 0) + 1;
        positions.set(row.target_id, position);
        snapshot.position = position;
      }
      return snapshot;
    });
  }

  /** Leases this process holds now (local view; no database call). */
  heldLeases(): Lease[] {
    return [...this.held.values()];
  }

  /** Number of waiting calls in this process. */
  waitingCount(): number {
    return this.queue.size;
  }

  /**
   * The lease's `fenced()`: lock the row, check the token, run `work` in the same transaction. A `fenced()`
   * of the same lease called from inside `work` joins that transaction in a savepoint: a second transaction would wait
   * for the first's row lock while the first waits for it in JavaScript, a deadlock PostgreSQL cannot see.
   */
  async fenced<T>(lease: HeldLease, work: (manager: EntityManager) => Promise<T>): Promise<T> {
    if (!lease.isHeld()) throw this.refuse(lease);
    const open = this.fences.getStore()?.get(lease);
    if (open && !open.closed) return this.joinFence(lease, open, work);
    // Under a serializable (or repeatable read) server default, locking a row a heartbeat has just renewed fails with
    // 40001; nothing of `work` has run yet, so the transaction simply starts again.
    // Only the lock step is retried: a serialization failure inside the user's work is the user's to handle.
    for (let attempt = 1; ; attempt++) {
      let lockFailed = false;
      try {
        return await this.fencedOnce(lease, work, () => (lockFailed = true));
      } catch (error) {
        if (!lockFailed || attempt >= 10 || !isSerializationFailure(error)) throw error;
        if (!lease.isHeld()) throw this.refuse(lease);
      }
    }
  }

  private fencedOnce<T>(
    lease: HeldLease,
    work: (manager: EntityManager) => Promise<T>,
    onLockFailed: () => void,
  ): Promise<T> {
    return this.database.transaction(async (manager) => {
      let locked: Awaited<ReturnType<LeaseStore['lockForFence']>>;
      try {
        // The row lock is waited for no longer than the lease may still be used.
        locked = await this.store.lockForFence(manager, lease.targetKey, lease.deadline - performance.now());
      } catch (error) {
        onLockFailed();
        throw isSerializationFailure(error) ? error : unavailableOr(error, lease.targetKey, 'lock the lease of');
      }
      const { leaseToken: token, timeline } = locked;
      // A lease of another timeline never writes on this one: its row there may be older than its holder believes.
      const acquiredIn = timelineOf(lease.fencingToken);
      if (timeline !== acquiredIn) {
        const detail = `timeline ${acquiredIn} → ${timeline}`;
        this.lose(lease, 'failover', detail);
        throw new LeaseLostError(lease.targetKey, 'failover', detail);
      }
      if (token !== lease.token) {
        this.lose(lease, 'taken-over');
        throw new LeaseLostError(lease.targetKey, 'taken-over');
      }
      const result = await this.withinFence(lease, manager, work);
      // The row lock keeps others out until COMMIT; still, once we told the work the lease was lost, nothing of
      // it may commit.
      if (!lease.isHeld()) throw this.refuse(lease);
      return result;
    });
  }

  /** Runs `work` with `manager` as the open fence of `lease` in this call chain. */
  private async withinFence<T>(
    lease: HeldLease,
    manager: EntityManager,
    work: (manager: EntityManager) => Promise<T>,
  ): Promise<T> {
    const fence: OpenFence = { manager, queue: Promise.resolve(), closed: false };
    const fences = new Map(this.fences.getStore());
    fences.set(lease, fence);
    try {
      return await this.fences.run(fences, () => work(manager));
    } finally {
      fence.closed = true;
    }
  }

  /** A nested part of an open fence: a savepoint on its connection; its failure rolls back only the part. */
  private joinFence<T>(lease: HeldLease, open: OpenFence, work: (manager: EntityManager) => Promise<T>): Promise<T> {
    const part = open.queue.then(() =>
      open.manager.transaction(async (inner) => {
        if (!lease.isHeld()) throw this.refuse(lease);
        return this.withinFence(lease, inner, work);
      }),
    );
    open.queue = part.catch(() => undefined);
    return part;
  }

  /**
   * A fenced write refused because the lease is not held. Past its deadline, the deadline timer may not have fired
   * yet (a process resumed from a pause runs its due timers in order): lose the lease now, so the signal, the 'lost'
   * event and the refusal agree.
   */
  private refuse(lease: HeldLease): LeaseLostError {
    if (lease.active) this.lose(lease, 'renewal-deadline');
    return new LeaseLostError(lease.targetKey, lease.lossReason);
  }

  /**
   * The lease's `release()`: token-guarded; idempotent; quiet when the lease was lost. A release that fails (the
   * database unreachable, or a statement past its bound) is retried in the background until it lands or the row has
   * expired by itself: a release is idempotent, and a row left held would block its key until it expires.
   */
  async release(lease: HeldLease): Promise<void> {
    if (!lease.markReleased()) return;
    this.forget(lease);
    const heldMs = performance.now() - (this.acquiredAt.get(lease) ?? performance.now());
    // The row expires `leaseTimeoutMs` after its last confirmed renewal, which was sent no earlier than this.
    const until = lease.deadline + this.options.safetyMarginMs;
    await this.releaseRow(lease.targetKey, lease.token, until, () =>
      this.emit({
        type: 'released',
        targetKey: lease.targetKey,
        fencingToken: lease.fencingToken,
        heldMs,
        at: new Date(),
      }),
    );
  }

  /** One release statement; on failure, the retries of `release`. Never rejects. */
  private releaseRow(targetKey: string, token: string, until: number, onReleased?: () => void): Promise<void> {
    return this.track(
      this.store.release(targetKey, token, shortBoundMs(this.options)).then(
        (released) => {
          if (released) onReleased?.();
        },
        (error: unknown) => this.retryRelease({ targetKey, token, until, delayMs: 50 }, error, onReleased),
      ),
    );
  }

  private retryRelease(entry: Unreleased, error: unknown, onReleased?: () => void): void {
    const leftMs = entry.until - performance.now();
    if (this.closing || leftMs <= entry.delayMs) {
      this.unreleased.delete(entry.token);
      this.logger.warn(`Release of "${entry.targetKey}" failed (${errorText(error)}); the lease expires by itself`);
      return;
    }
    if (!this.unreleased.has(entry.token)) {
      this.logger.warn(
        `Release of "${entry.targetKey}" failed (${errorText(error)}); retrying until it lands (the lease would ` +
          `expire by itself in ${Math.round(leftMs)} ms)`,
      );
    }
    this.unreleased.set(entry.token, entry);
    entry.timer = setTimeout(() => {
      entry.delayMs = Math.min(entry.delayMs * 2, this.options.heartbeatIntervalMs);
      void this.retryNow(entry, onReleased);
    }, entry.delayMs);
    entry.timer.unref();
  }

  /** The next try of a failed release (at its timer, or at once at shutdown). */
  private retryNow(entry: Unreleased, onReleased?: () => void): Promise<void> {
    clearTimeout(entry.timer);
    return this.track(
      this.store.release(entry.targetKey, entry.token, shortBoundMs(this.options)).then(
        (released) => {
          this.unreleased.delete(entry.token);
          if (released) onReleased?.();
        },
        (error: unknown) => this.retryRelease(entry, error, onReleased),
      ),
    );
  }

  /** One acquire statement. A refused waiter learns when a hold's tail ends (no NOTIFY marks it). */
  private attempt(
    targetKey: string,
    priority: number,
    holdMs: number,
    waiter?: Waiter,
    queueAs?: QueueAs,
  ): Promise<HeldLease | null> {
    return this.track(this.attemptOnce(targetKey, priority, holdMs, waiter, queueAs));
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
    const row = await this.store.tryAcquire(request).catch((error: unknown) => {
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
      await this.releaseRow(targetKey, leaseToken, row.sentAt + this.options.leaseTimeoutMs);
      throw new LeaseShutdownError(targetKey);
    }
    const localLimitMs = this.options.leaseTimeoutMs - this.options.safetyMarginMs;
    if (performance.now() >= row.sentAt + localLimitMs) {
      // Granted, but answered past its local deadline (the statement ran to its bound): a lease nobody could use.
      await this.releaseRow(targetKey, leaseToken, row.sentAt + this.options.leaseTimeoutMs);
      throw new LeaseUnavailableError(targetKey, `the grant arrived after its local deadline (${localLimitMs} ms)`, {
        kind: 'failing',
      });
    }
    const lease = new HeldLease(targetKey, leaseToken, row.fencingToken, row.sentAt, localLimitMs, this, (expired) =>
      this.lose(expired, 'renewal-deadline'),
    );
    this.held.set(leaseToken, lease);
    this.acquiredAt.set(lease, row.sentAt);
    this.startHeartbeat();
    const at = new Date();
    if (row.tookOver) {
      this.logger.log(
        `Took over expired lease on "${targetKey}" from ${row.previousOwner ?? 'unknown'} ` +
          `(fencing token ${row.fencingToken})`,
      );
      this.emit({
        type: 'taken-over',
        targetKey,
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
    this.emit({ type: 'lost', targetKey: lease.targetKey, fencingToken: lease.fencingToken, reason, at: new Date() });
  }

  private forget(lease: HeldLease): void {
    this.held.delete(lease.token);
  }

  /**
   * Runs while leases are held. It stops at its first tick that finds none, not at the last release: a process that
   * acquires and releases in a loop keeps one heartbeat rather than building and tearing one down per lease.
   */
  private startHeartbeat(): void {
    this.heartbeat ??= batchedHeartbeat(
      this.options.heartbeatIntervalMs,
      () => {
        if (this.held.size === 0) queueMicrotask(() => this.held.size === 0 && this.stopHeartbeat());
        return [...this.held.values()];
      },
      (batch) =>
        this.store
          .renew(
            batch.map((lease) => lease.targetKey),
            batch.map((lease) => lease.token),
            this.options.heartbeatIntervalMs,
            { fencingTokens: batch.map((lease) => lease.fencingToken), systemId: this.systemId },
          )
          .then((result) => this.noteHistory(result)),
    ).subscribe((tick) => this.onHeartbeat(tick));
  }

  /**
   * A renewal that found the server in another history (see `LeaseStore.renew`): one line saying what changed; the
   * leases acquired before are lost in `onHeartbeat`. Leases acquired from now on belong to the server's system.
   */
  private noteHistory(result: RenewResult): RenewResult {
    const here = result.history;
    if (!here || !result.failover?.size) return result;
    this.failoverDetail = describeChange(here, this.systemId);
    this.logger.warn(
      `The database's history changed (${this.failoverDetail}): ${result.failover.size} lease(s) acquired before ` +
        'are lost (reason failover); their work must stop, their fenced writes are refused',
    );
    if (here.systemId !== null) this.systemId = here.systemId;
    return result;
  }

  private stopHeartbeat(): void {
    this.heartbeat?.unsubscribe();
    this.heartbeat = undefined;
  }

  private onHeartbeat(tick: HeartbeatTick<HeldLease>): void {
    const at = new Date();
    if (tick.error !== undefined) {
      this.logger.warn(
        `Heartbeat of ${tick.batch.length} lease(s) failed (${errorText(tick.error)}); retrying next tick`,
      );
      this.emit({
        type: 'renew-failed',
        leases: tick.batch.length,
        error: errorText(tick.error),
        latencyMs: tick.latencyMs,
        at,
      });
      return;
    }
    for (const lease of tick.batch) {
      if (!lease.active) continue;
      if (tick.kept?.has(lease.token)) {
        lease.confirm(tick.sentAt);
        this.emit({
          type: 'renewed',
          targetKey: lease.targetKey,
          fencingToken: lease.fencingToken,
          latencyMs: tick.latencyMs,
          at,
        });
      } else if (tick.skipped?.has(lease.token)) {
        // Its row is locked (a fenced transaction of ours, usually): not renewed, not lost; the local deadline decides.
      } else if (tick.failover?.has(lease.token)) {
        this.lose(lease, 'failover', this.failoverDetail);
      } else if (tick.expired?.has(lease.token)) {
        this.lose(lease, 'renewal-deadline');
      } else {
        this.lose(lease, 'taken-over');
      }
    }
  }

  /** The one check of a call's key, priority and hold (`LeaseKeyError` / argument errors). */
  private request(targetKey: unknown, options: TryAcquireOptions): LeaseRequest {
    assertTargetKey(targetKey);
    if (options.priority !== undefined) assertPriority(options.priority);
    assertHoldAtLeastMs(options.holdAtLeastMs);
    return { targetKey, priority: options.priority ?? 0, holdMs: options.holdAtLeastMs ?? 0 };
  }

  private waitTimeoutOf(options: AcquireOptions): number {
    const waitTimeoutMs = options.waitTimeoutMs ?? this.options.defaultWaitTimeoutMs;
    if (!Number.isInteger(waitTimeoutMs) || waitTimeoutMs < 0 || waitTimeoutMs > 2_147_483_647) {
      throw new LeaseArgumentError(messages.waitTimeoutArgument(options.waitTimeoutMs));
    }
    return waitTimeoutMs;
  }

  private emitWaitEnded(
    targetKey: string,
    priority: number,
    outcome: 'granted' | 'timeout' | 'aborted' | 'error',
    started: number,
  ): void {
    this.emit({
      type: 'wait-ended',
      targetKey,
      priority,
      outcome,
      waitedMs: performance.now() - started,
      at: new Date(),
    });
  }

  private emit(event: LeaseEvent): void {
    if (!this.events.closed) this.events.next(event);
  }
}

/** How the server's history differs from the leases': for log lines and `LeaseLostError` details. */
function describeChange(here: ServerHistory, systemId: string | null): string {
  if (here.recovery) return 'the server is in recovery: a standby, or a failover under way';
  if (systemId !== null && here.systemId !== null && here.systemId !== systemId) {
    return `another database cluster: system identifier ${systemId} → ${here.systemId}`;
  }
  return `the server is on timeline ${here.timeline}`;
}
