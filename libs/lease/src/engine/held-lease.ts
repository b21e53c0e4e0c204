import type { EntityManager } from 'typeorm';
import { LeaseArgumentError, LeaseLostError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { LeaseLossReason } from '../interfaces/lease-loss-reason.interface.js';
import type { FencedOptions, Lease } from '../interfaces/lease.interface.js';
import type { HolderSpan } from '../observability/tracing.js';
import { NO_KEY_TEMPLATE } from '../options/call-input.js';
import { OWN_ROW_SLOT, SHARED_LIMIT, slotOfRow } from '../options/slot-limits.js';
import type { RowRef } from '../core/backend.js';

/** What a lease handle needs from the engine that made it. */
export interface LeaseHandleOwner {
  fenced<T>(lease: HeldLease, work: (manager: EntityManager) => Promise<T>, options?: FencedOptions): Promise<T>;
  release(lease: HeldLease): Promise<void>;
}

type LeaseState = 'held' | 'lost' | 'released';

/** The engine's lease handle. Internal bookkeeping (confirmation time, deadline) lives here. */
export class HeldLease implements Lease {
  /** Made on the first read of `signal`: a lease whose signal nobody reads costs no controller and no abort. */
  private controller?: AbortController;
  /** Why the signal is (or, once read, will be) aborted; set when the lease ends. */
  private endReason?: () => unknown;
  /** That reason, built once someone hears it (the signal, a watcher). */
  private endValue?: { readonly reason: unknown };
  /** Lost, or released with a reason of its own (shutdown): what `watchLoss` tells. */
  private endedWithReason = false;
  /** Told the reason when the lease is lost, without a signal (see `watchLoss`). */
  private watchers?: Set<(reason: unknown) => void>;
  private state: LeaseState = 'held';
  private lostReason?: LeaseLossReason;
  /** Monotonic time when the last confirmed renewal (or the acquisition) was sent. */
  private confirmedAt: number;
  private deadlineTimer?: NodeJS.Timeout;
  /** What the key is an instance of (`TryAcquireOptions.keyTemplate`): traces and metrics name the lease by it. */
  keyTemplate = NO_KEY_TEMPLATE;
  /** Acquired by taking over an expired row. */
  tookOver = false;
  /** Acquired by the lone caller's statement (see `AcquiredRow.lone`). */
  lone = false;
  /** Granted to a waiting call of this process in the key's line: its release may park a place (see `LeaseEngine`). */
  throughLine = false;
  /**
   * Its release is in a fenced transaction's COMMIT now (`fenced(work, { release: true })`): a renewal that finds the
   * row gone meanwhile is that release, not a takeover.
   */
  releasingWithSave = false;
  /** Its row's lease length (its call's, else the module's): every renewal keeps it (see `LeaseHeartbeat`). */
  leaseTimeoutMs?: number;
  /** The slot of the lease's row: 0, the key's own (a single holder), or a semaphore's (see options/slot-limits.ts). */
  rowSlot = OWN_ROW_SLOT;
  /** A read-write lease's mode (its row is a reader's or the writer's, see options/slot-limits.ts). */
  mode?: 'shared' | 'exclusive';
  /** The caller's span at acquisition (an HTTP request's, say): heartbeat failures and the loss are its events. */
  holder?: HolderSpan;

  constructor(
    readonly targetKey: string,
    readonly token: string,
    readonly fencingToken: bigint,
    /** Monotonic time when the acquiring statement was sent (a hold's length counts from it). */
    readonly acquiredAt: number,
    /** leaseTimeoutMs − safetyMarginMs */
    private readonly localLimitMs: number,
    private readonly engine: LeaseHandleOwner,
    private readonly onDeadline: (lease: HeldLease) => void,
  ) {
    this.confirmedAt = acquiredAt;
    this.armDeadline();
  }

  get slot(): number | undefined {
    return this.mode === undefined ? slotOfRow(this.rowSlot) : undefined;
  }

  /** The lease row: the key's own, or its slot's (renewals, fences and releases name it). */
  get row(): RowRef {
    const { targetKey, rowSlot: slot } = this;
    return this.mode === undefined && slot > OWN_ROW_SLOT ? { targetKey, slot, semaphore: true } : { targetKey, slot };
  }

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.endReason) this.controller.abort(this.reason());
    }
    return this.controller.signal;
  }

  /**
   * Calls `onLoss` with the reason the lease is lost, or released with a reason of its own (shutdown's
   * `LeaseShutdownError`) — the reason its signal aborts with — at once if that happened already, until the returned
   * function is called. A plain release is not told. For the engine's own callers (`@Exclusive`): it costs no
   * AbortController, no listener, and no abort reason built for a lease released the ordinary way.
   */
  watchLoss(onLoss: (reason: unknown) => void): () => void {
    if (this.endReason) {
      if (this.endedWithReason) onLoss(this.reason());
      return () => undefined;
    }
    (this.watchers ??= new Set()).add(onLoss);
    return () => this.watchers?.delete(onLoss);
  }

  isHeld(): boolean {
    return this.state === 'held' && performance.now() < this.deadline;
  }

  /** Monotonic time after which the holder must consider the lease lost. */
  get deadline(): number {
    return this.confirmedAt + this.localLimitMs;
  }

  /**
   * Why `isHeld()` is false (meaningful only then). A lease lost before its release keeps the reason of its loss: a
   * preempted run's handler releases at once (409), and its save after that was refused as "already released".
   */
  get lossReason(): LeaseLossReason {
    if (this.state === 'lost') return this.lostReason ?? 'taken-over';
    if (this.state === 'released') return this.lostReason ?? 'released';
    return 'renewal-deadline';
  }

  get active(): boolean {
    return this.state === 'held';
  }

  fenced<T>(work: (manager: EntityManager) => Promise<T>, options?: FencedOptions): Promise<T> {
    return this.engine.fenced(this, work, options);
  }

  release(): Promise<void> {
    return this.engine.release(this);
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }

  /** A renewal sent at `sentAt` was confirmed by the database. Ignored once the lease is no longer held. */
  confirm(sentAt: number): void {
    if (this.state !== 'held' || sentAt <= this.confirmedAt) return;
    // A confirmation arriving after the deadline cannot resurrect the lease: the deadline already fired (or is
    // about to, in this same turn of the event loop), and the work was told to stop.
    if (performance.now() >= this.deadline) return;
    this.confirmedAt = sentAt;
    this.armDeadline();
  }

  /** Marks the lease lost and aborts its signal. Returns false when it was not held any more. */
  markLost(reason: LeaseLossReason, detail?: string): boolean {
    if (this.state !== 'held') return false;
    this.state = 'lost';
    this.lostReason = reason;
    this.disarm();
    this.end(() => new LeaseLostError(this.targetKey, reason, detail), true);
    return true;
  }

  /**
   * Marks the lease released and aborts its signal (with `reason()` when given: shutdown's `LeaseShutdownError`).
   * Returns false when it was already released.
   */
  markReleased(reason?: () => unknown): boolean {
    if (this.state === 'released') return false;
    const wasHeld = this.state === 'held';
    this.state = 'released';
    this.disarm();
    if (wasHeld) {
      if (reason) this.end(reason, true);
      else this.end(() => new DOMException(`Lease on "${this.targetKey}" was released`, 'AbortError'), false);
    }
    return true;
  }

  /**
   * Aborts the signal with `reason()` now if it was read (and, `told`: tells the watchers), else when it is first
   * read.
   */
  private end(reason: () => unknown, told: boolean): void {
    this.endReason = reason;
    this.endedWithReason = told;
    const watchers = told ? this.watchers : undefined;
    this.watchers = undefined;
    if (!this.controller && !watchers?.size) return;
    const value = this.reason();
    this.controller?.abort(value);
    for (const onLoss of watchers ?? []) onLoss(value);
  }

  private reason(): unknown {
    this.endValue ??= { reason: this.endReason!() };
    return this.endValue.reason;
  }

  private armDeadline(): void {
    this.disarm();
    const delay = Math.max(0, this.deadline - performance.now());
    this.deadlineTimer = setTimeout(() => {
      if (this.state === 'held' && performance.now() >= this.deadline) this.onDeadline(this);
      else if (this.state === 'held') this.armDeadline();
    }, delay);
    this.deadlineTimer.unref();
  }

  private disarm(): void {
    if (this.deadlineTimer) clearTimeout(this.deadlineTimer);
    this.deadlineTimer = undefined;
  }
}

/** A reentrant view of a lease held further up the same call chain: releasing it is left to its owner. */
export class BorrowedLease implements Lease {
  /** `asked`: the nested call's request; a reader's lease is never lent to a call that asks more (an upgrade). */
  constructor(
    private readonly held: Lease,
    asked?: { limit: number },
  ) {
    if (held.mode === 'shared' && asked !== undefined && asked.limit !== SHARED_LIMIT) {
      throw new LeaseArgumentError(messages.sharedNotUpgraded(held.targetKey), held.targetKey);
    }
  }
  get mode() {
    return this.held.mode;
  }
  get targetKey() {
    return this.held.targetKey;
  }
  get token() {
    return this.held.token;
  }
  get fencingToken() {
    return this.held.fencingToken;
  }
  get slot() {
    return this.held.slot;
  }
  get signal() {
    return this.held.signal;
  }
  isHeld() {
    return this.held.isHeld();
  }
  fenced<T>(work: (manager: EntityManager) => Promise<T>, options?: FencedOptions) {
    if (options?.release === true)
      return Promise.reject(new LeaseArgumentError(messages.releaseOfBorrowedLease(), this.targetKey));
    return this.held.fenced(work, options);
  }
  async release(): Promise<void> {
    // The outer call that acquired the lease releases it when it ends.
  }
  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }
}

/**
 * A sticky call's handle on its owner's term lease, for the length of its turn: the same lease (token, fencing token,
 * fenced writes) while the call runs; once the call ends, `isHeld()` is false, its signal aborts and `fenced()` is
 * refused, although the term goes on. So a call chain the ended call left behind (a timer it set, a promise it did
 * not await) is not nested in it: a sticky call started from there takes a turn of its own instead of borrowing this
 * one. `release()` does nothing: the turn ends with the call, and the term is the owner's.
 */
export class TurnLease extends BorrowedLease {
  private readonly ended = new AbortController();
  private turnSignal?: AbortSignal;

  constructor(private readonly term: Lease) {
    super(term);
  }

  override get signal(): AbortSignal {
    this.turnSignal ??= AbortSignal.any([this.term.signal, this.ended.signal]);
    return this.turnSignal;
  }

  /** The call's turn ended. */
  end(): void {
    if (!this.ended.signal.aborted) {
      this.ended.abort(new DOMException(`The turn of this call on "${this.targetKey}" ended`, 'AbortError'));
    }
  }

  override isHeld(): boolean {
    return !this.ended.signal.aborted && super.isHeld();
  }

  override fenced<T>(work: (manager: EntityManager) => Promise<T>, options?: FencedOptions): Promise<T> {
    if (this.ended.signal.aborted) return Promise.reject(new LeaseLostError(this.targetKey, 'released'));
    return super.fenced(work, options);
  }
}
