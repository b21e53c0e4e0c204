import type { Lease } from './lease.interface.js';
import type { LeaseLossReason } from './lease-loss-reason.interface.js';

/**
 * Why a leader stopped leading: its lease was lost (`taken-over`, `renewal-deadline`, `failover`: its signal aborted,
 * its fenced writes are refused), the candidate was stopped (`stopped`: `stop()`, the application shutting down), the
 * service closed under it (`shutdown`), or `onElected` threw (`resigned`).
 */
export type LeadershipEndReason = Exclude<LeaseLossReason, 'released'> | 'stopped' | 'shutdown' | 'resigned';

/** Options of `LeaseService.elect()` (and, without the hooks, of `@LeaderElection`). */
export interface ElectOptions {
  /** The candidate's place in the priority line: a higher one is elected first when the leader goes. @default 0 */
  priority?: number;
  /** Metrics and traces name the key by it (see `TryAcquireOptions.keyTemplate`). @default the key */
  keyTemplate?: string;
  /** Aborting it stops the candidate (like `stop()`). */
  signal?: AbortSignal;
  /**
   * Called once per term, with the term's lease (`lease.fencingToken` is the term). A throw resigns the term. The term
   * does not wait for it: it ends when `lease.signal` aborts (a stop releases at once); a stopped candidate waits for
   * it no longer than `shutdownGraceMs`.
   */
  onElected?: (lease: Lease) => unknown;
  /** Called when a term ends (after the lease is released or lost), with why. */
  onRevoked?: (reason: LeadershipEndReason) => unknown;
}

/** A candidate for leadership of one key, from `LeaseService.elect()`: it stays in line until stopped. */
export interface Leadership extends AsyncDisposable {
  readonly targetKey: string;
  /** True while this candidate leads (its lease is held by the local clock). */
  readonly isLeader: boolean;
  /** The lease of the current term, while leading. */
  readonly lease: Lease | undefined;
  /** Leaves the line; a leader releases its lease at once (the next candidate is woken by NOTIFY). Idempotent. */
  stop(): Promise<void>;
}

/** Options of `@LeaderElection` (the hooks are the provider's `onElected` / `onRevoked` methods). */
export type LeaderElectionOptions = Pick<ElectOptions, 'priority' | 'keyTemplate'>;

/** What a `@LeaderElection` provider may implement. */
export interface OnLeadership {
  onElected?(lease: Lease): unknown;
  onRevoked?(reason: LeadershipEndReason): unknown;
}
