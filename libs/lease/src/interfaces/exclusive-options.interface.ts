/** What `@Exclusive` and `@Sticky` take. */
import type { RefusableCallOptions } from './refusable-call.interface.js';
import type { BusyPolicy } from './busy-policy.interface.js';

/** A key template such as `'report:{id}'`, or a function of the method's arguments (after pipes, for handlers). */
export type ExclusiveKey = string | ((...args: any[]) => string);

/** What every `@Exclusive` declaration takes (the key template names its calls in traces and metrics). */
interface DeclaredCall extends RefusableCallOptions {
  /**
   * The call's rank: its place in line when it waits, the rank a preemption compares, and the rank the no-barging
   * rule compares when it does not wait (see `RunOptions`). Never makes a call wait by itself: `onBusy` does (the
   * shorthand `@Exclusive(key, 5)` is `{ priority: 5, onBusy: 'wait' }`). @default 0
   */
  priority?: number;
  /**
   * After release, the target stays taken until this long after the acquisition (database clock): a scheduled job
   * that finishes in milliseconds is not run again by an instance whose timer fires a little later. @default 0
   */
  holdAtLeastMs?: number;
  /**
   * The lease length of this method's calls, instead of the module's `timing.leaseTimeoutMs` (see
   * `RunOptions.leaseTimeoutMs`). Not a positive integer: a `LeaseConfigError` at decoration; below what the
   * module's timing keeps: a `LeaseConfigError` at bootstrap. @default timing.leaseTimeoutMs
   */
  leaseTimeoutMs?: number;
}

/** A single-holder `@Exclusive`: every busy policy. */
interface SingleExclusiveOptions extends DeclaredCall {
  /** One holder. @default 1 */
  limit?: 1;
  mode?: never;
  /**
   * What a busy target does to the call: `'throw'` a `LeaseBusyError` (HTTP 409); `'skip'` — the method does not run,
   * the call resolves `undefined`, `events$` emits `busy` (scheduled jobs, event listeners; not for HTTP handlers,
   * refused at bootstrap); `'wait'` in line; `'join'` the run holding the target (an HTTP duplicate answers what the
   * original answers); `'preempt'` a holder of lower priority. See `BusyPolicy`. @default 'throw'
   */
  onBusy?: BusyPolicy;
}

/** A semaphore `@Exclusive` (`limit` above 1): it throws, skips or waits, never joins or preempts. */
interface SemaphoreExclusiveOptions extends DeclaredCall {
  /** Up to this many calls hold the key at once (a semaphore, see `TryAcquireOptions.limit`). */
  limit: number;
  mode?: never;
  /** `'throw'`, `'skip'` or `'wait'` for a slot (see `BusyPolicy`). @default 'throw' */
  onBusy?: 'throw' | 'skip' | Extract<BusyPolicy, 'wait' | { wait: unknown }>;
}

/** A read-write `@Exclusive` (`mode`, docs/read-write.md): it throws, skips or waits, never joins or preempts. */
interface ReadWriteExclusiveOptions extends Omit<DeclaredCall, 'holdAtLeastMs'> {
  /** `'shared'` (many holders) or `'exclusive'` (one; see `TryAcquireOptions.mode`). */
  mode: 'shared' | 'exclusive';
  /** `'throw'`, `'skip'` or `'wait'` (see `BusyPolicy`). @default 'throw' */
  onBusy?: 'throw' | 'skip' | Extract<BusyPolicy, 'wait' | { wait: unknown }>;
}

/** Options of `@Exclusive(key, options)`: one busy policy; a semaphore's or a read-write one cannot join or preempt. */
export type ExclusiveOptions = SingleExclusiveOptions | SemaphoreExclusiveOptions | ReadWriteExclusiveOptions;

/** Options of `@Sticky(key, options)`: an owner keeps the lease across calls, so no limit, join, preempt or hold. */
export interface StickyOptions {
  /** The instance's place in the owner election's line, and the rank of its waiting calls. @default 0 */
  priority?: number;
  /**
   * What a call that overlaps the owner's running call does: `'throw'` a `LeaseBusyError`, `'skip'` (resolves
   * `undefined`, a `busy` event), or `'wait'` its turn (`{ wait: { timeoutMs } }`). On an instance that is not the
   * owner the call never runs: a `LeaseBusyError` with `'throw'`, skipped with `'skip'` or `'wait'`. @default 'throw'
   */
  onBusy?: 'throw' | 'skip' | Extract<BusyPolicy, 'wait' | { wait: unknown }>;
}
