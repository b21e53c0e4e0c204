/** Several keys at once (`LeaseService.run([k1, k2, …], work, options)`; docs/multi-key.md): at most 16 keys. */
import type { EntityManager } from 'typeorm';
import type { WaitPolicy } from './busy-policy.interface.js';
import type { Lease } from './lease.interface.js';
import type { RefusableCallOptions } from './refusable-call.interface.js';

/**
 * Options of `LeaseService.run([k1, k2, …], work, options)`: the options of a single-holder `run`, applied to every
 * key, without the policies a set of keys has no meaning for (`'join'`, `'preempt'`) nor a semaphore's `limit`.
 */
export interface MultiRunOptions extends RefusableCallOptions {
  /** Every key's rank in its line (see `RunOptions`). @default 0 */
  priority?: number;
  /** Every key stays taken this long after its acquisition (see `RunOptions`). @default 0 */
  holdAtLeastMs?: number;
  /** Every key's lease length (see `RunOptions`). @default timing.leaseTimeoutMs */
  leaseTimeoutMs?: number;
  /** What the keys are instances of, for spans and metrics (see `RunOptions`). @default '(none)' */
  keyTemplate?: string;
  /** One holder per key: a set of keys is not a semaphore. @default 1 */
  limit?: 1;
  /**
   * What a busy key does: `'throw'` a `LeaseBusyError` naming it, the keys taken before it given back (the default);
   * or `'wait'` in each key's line in turn, holding the keys before it, the whole call bounded by one `timeoutMs`.
   * @default 'throw'
   */
  onBusy?: 'throw' | 'wait' | { wait: WaitPolicy; join?: never; preempt?: never };
  /** Aborts the wait (the rejection is the signal's reason); the keys taken are given back first. */
  signal?: AbortSignal;
}

/**
 * The leases of one `run([k1, k2, …])`, one per key, held together: taken all or none, released together when the
 * work settles, and the work told to stop when any of them is lost.
 */
export interface MultiLease {
  /** The keys, in the global order they were acquired in (code-unit order of the strings). */
  readonly targetKeys: readonly string[];
  /** One lease per key, in the order of `targetKeys`: each its own token, fencing token and heartbeat. */
  readonly leases: readonly Lease[];
  /** Each key's fencing token. */
  readonly fencingTokens: ReadonlyMap<string, bigint>;
  /** Aborted when any of the leases is lost (its `LeaseLostError`) or released. */
  readonly signal: AbortSignal;
  /** True while every lease is held (see `Lease.isHeld`). */
  isHeld(): boolean;
  /**
   * Runs `work` in one transaction that first locks every lease row (in the order of `targetKeys`, one statement) and
   * checks every token: rejects with `LeaseLostError` when any lease is no longer ours, and writes nothing.
   */
  fenced<T>(work: (manager: EntityManager) => Promise<T>): Promise<T>;
  /** The lease of one of the keys. */
  lease(targetKey: string): Lease | undefined;
}

/**
 * Options of `@Exclusive([template1, template2, …], options)`: the options of `MultiRunOptions` a declaration takes
 * (no `signal`, no `keyTemplate`: the templates name the calls), and `'skip'` (the method does not run when a key is
 * busy, the call resolves `undefined`).
 */
export interface MultiExclusiveOptions extends RefusableCallOptions {
  /** Every key's rank in its line. @default 0 */
  priority?: number;
  /** Every key stays taken this long after its acquisition. @default 0 */
  holdAtLeastMs?: number;
  /** Every key's lease length. @default timing.leaseTimeoutMs */
  leaseTimeoutMs?: number;
  /** One holder per key. @default 1 */
  limit?: 1;
  /** `'throw'` (the default: HTTP 409), `'skip'`, or `'wait'` in each key's line in turn. @default 'throw' */
  onBusy?: 'throw' | 'skip' | 'wait' | { wait: WaitPolicy; join?: never; preempt?: never };
}
