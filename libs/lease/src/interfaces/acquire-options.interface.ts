/** Options of `LeaseService.tryAcquire()`, `acquire()` and `run()`: the call's rank, its hold, and its busy policy. */
import type { BusyPolicy } from './busy-policy.interface.js';
import type { RefusableCallOptions } from './refusable-call.interface.js';

export type { RetryAfterContext } from './refusable-call.interface.js';

/** What every call takes (`tryAcquire`, `acquire`, `run`; `@Exclusive` all but `keyTemplate`). */
interface CallOptions {
  /**
   * The call's rank: its place in the key's priority line when it waits (higher first, first come first served within
   * a priority), the rank a preemption compares, and the rank the no-barging rule compares for a call that does not
   * wait (a live waiter at least as high is ahead of it). Never makes a call wait by itself: `onBusy` does.
   * An integer in PostgreSQL's `integer` range. @default 0
   */
  priority?: number;
  /**
   * The target stays taken until this long after the acquisition (database clock), even once released — with no
   * heartbeat for that tail. For jobs that must run once per tick across instances (ShedLock's `lockAtLeastFor`):
   * an instance whose timer fires a few milliseconds late finds the target still taken. A non-negative integer, at
   * most 2147483647. @default 0
   */
  holdAtLeastMs?: number;
  /**
   * This call's lease length, instead of the module's `timing.leaseTimeoutMs`: its row expires this long after its
   * last renewal (other processes take it over then), renewals keep it, and the holder gives the lease up locally at
   * `leaseTimeoutMs − safetyMarginMs` without a confirmed renewal. Short for a quick job (a dead holder is taken over
   * sooner), long for a long one (it rides out longer database stalls). The heartbeat interval stays the process's,
   * so the value must satisfy the module's own timing rules (`LeaseArgumentError` otherwise, naming the floor):
   * at least 3 × heartbeatIntervalMs, safetyMarginMs + 2 × heartbeatIntervalMs and
   * (fencedIdleTimeoutMs + safetyMarginMs + 2 × heartbeatIntervalMs) / 2; at most 2147483647. A reentrant call
   * borrows the outer lease, with its length. @default timing.leaseTimeoutMs
   */
  leaseTimeoutMs?: number;
  /**
   * What the key is an instance of, e.g. `'report:{userId}'` for `report:42`: the `lease.key_template` attribute of
   * the call's spans (and the `key_template` label of its metrics). Never the key itself: it names a kind of work, so
   * traces group and metrics keep few series. `@Exclusive` sets it to its key template (or `Class.method` for a key
   * function). @default '(none)'
   */
  keyTemplate?: string;
}

/** Options of `LeaseService.tryAcquire()`: one attempt, never a wait (so no `onBusy`). */
export interface TryAcquireOptions extends CallOptions {
  /**
   * How many may hold the key at once (a semaphore; docs/semaphores.md): each holder gets a slot,
   * a lease of its own (token, fencing token, heartbeat, `fenced()`), and the (limit + 1)-th caller is refused or
   * waits in the key's one priority line. Every caller of a key must ask the same limit (`LeaseLimitConflictError`).
   * An integer from 1 to 1000; 1 is the single-holder lease. @default 1
   */
  limit?: number;
  /**
   * A read-write lease (docs/read-write.md): `'shared'` — many holders at once, each with a lease of its own — or
   * `'exclusive'` — one holder, none shared. A writer waiting in line keeps readers that come after it out (no
   * writer starvation); a writer's fencing token is above every reader's of the key, and a reader's `fenced()` is
   * refused once a writer holds the key. Every caller of a read-write key passes a mode (not with `limit`, `join`,
   * `preempt`, `holdAtLeastMs`). @default none: a single holder's lease
   */
  mode?: 'shared' | 'exclusive';
}

/** A read-write call: no semaphore's limit (not a member: an object literal with one is refused), no hold's tail. */
interface ReadWriteCall extends Omit<CallOptions, 'holdAtLeastMs'> {
  /** `'shared'` or `'exclusive'` (see `TryAcquireOptions.mode`). */
  mode: 'shared' | 'exclusive';
}

/** `acquire` waits by definition: in line, or preempting a holder of lower priority. */
type AcquirePolicy = Extract<BusyPolicy, 'wait' | { wait: unknown } | 'preempt' | { preempt: unknown }>;
/** A semaphore's call (`limit` above 1) has no single holder to join or preempt. */
type SemaphoreWait = Extract<BusyPolicy, 'wait' | { wait: unknown }>;
/** `run` never skips (`'skip'` is a decorated method's: a call of `run` needs its value). */
type RunPolicy = Exclude<BusyPolicy, 'skip'>;

/** `acquire()` of a single-holder lease. */
interface SingleAcquireOptions extends CallOptions {
  /** One holder (see `TryAcquireOptions.limit`). @default 1 */
  limit?: 1;
  mode?: never;
  /**
   * What a busy key does: `'wait'` in line (`{ wait: { timeoutMs } }`), or `'preempt'` a holder of lower priority
   * (`{ preempt: { graceMs, waitTimeoutMs } }`). See `BusyPolicy`. @default 'wait'
   */
  onBusy?: AcquirePolicy;
  /** Aborts the wait (the rejection is the signal's reason); the waiter row is removed first. */
  signal?: AbortSignal;
}

/** `acquire()` of a semaphore's slot (`limit` above 1): it waits in line, never preempts. */
interface SemaphoreAcquireOptions extends CallOptions {
  /** How many may hold the key at once (see `TryAcquireOptions.limit`). */
  limit: number;
  mode?: never;
  /** `'wait'` in line for a slot (`{ wait: { timeoutMs } }`). @default 'wait' */
  onBusy?: SemaphoreWait;
  /** Aborts the wait (the rejection is the signal's reason); the waiter row is removed first. */
  signal?: AbortSignal;
}

/** `acquire()` of a read-write lease (`mode`): it waits in line, never preempts. */
interface ReadWriteAcquireOptions extends ReadWriteCall {
  /** `'wait'` in line (`{ wait: { timeoutMs } }`). @default 'wait' */
  onBusy?: SemaphoreWait;
  /** Aborts the wait (the rejection is the signal's reason); the waiter row is removed first. */
  signal?: AbortSignal;
}

/**
 * Options of `LeaseService.acquire()`: it waits in line (or preempts); a semaphore's or a read-write call only
 * waits.
 */
export type AcquireOptions = SingleAcquireOptions | SemaphoreAcquireOptions | ReadWriteAcquireOptions;

/** `run()` of a single-holder lease. */
interface SingleRunOptions extends CallOptions, RefusableCallOptions {
  /** One holder (see `TryAcquireOptions.limit`). @default 1 */
  limit?: 1;
  mode?: never;
  /**
   * What a busy key does: `'throw'` a `LeaseBusyError`, `'wait'` in line, `'join'` the run holding it (its value must
   * be JSON, else a `LeaseArgumentError`), or `'preempt'` a holder of lower priority. See `BusyPolicy`.
   * @default 'throw'
   */
  onBusy?: RunPolicy;
  /** Aborts the wait (the rejection is the signal's reason); the waiter row is removed first. */
  signal?: AbortSignal;
}

/** `run()` under a semaphore's slot (`limit` above 1): it throws or waits, never joins or preempts. */
interface SemaphoreRunOptions extends CallOptions, RefusableCallOptions {
  /** How many may hold the key at once (see `TryAcquireOptions.limit`). */
  limit: number;
  mode?: never;
  /** `'throw'` a `LeaseBusyError` when every slot is held, or `'wait'` in line for one. @default 'throw' */
  onBusy?: 'throw' | SemaphoreWait;
  /** Aborts the wait (the rejection is the signal's reason); the waiter row is removed first. */
  signal?: AbortSignal;
}

/** `run()` of a read-write lease (`mode`): it throws or waits, never joins or preempts. */
interface ReadWriteRunOptions extends ReadWriteCall, RefusableCallOptions {
  /** `'throw'` a `LeaseBusyError` when the mode cannot hold now, or `'wait'` in line. @default 'throw' */
  onBusy?: 'throw' | SemaphoreWait;
  /** Aborts the wait (the rejection is the signal's reason); the waiter row is removed first. */
  signal?: AbortSignal;
}

/** Options of `LeaseService.run()`: one busy policy; a semaphore's or a read-write call cannot join or preempt. */
export type RunOptions = SingleRunOptions | SemaphoreRunOptions | ReadWriteRunOptions;
