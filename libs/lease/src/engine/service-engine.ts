/**
 * What the doors (`LeaseService`'s methods, `@Exclusive` through the explorer and the registry) need of an engine:
 * `LeaseEngine` implements it, over PostgreSQL rows or (the testing kit) the memory backend. Types
 * only: the doors never depend on how an engine keeps its leases.
 */
import type { Observable } from 'rxjs';
import type { LeaseEvent, LeaseEventType, LeaseSnapshot } from '../interfaces/lease-event.interface.js';
import type { LeaseCall, WaitingPlan } from '../options/busy-policy.js';
import type { LeaseRequest } from '../options/call-input.js';
import type { EngineSettings } from '../options/engine-settings.js';
import type { Lease } from '../interfaces/lease.interface.js';
import type { FencedTransactions } from './fenced-transaction.js';

/** A lease entered by `run` or `@Exclusive`, and how to leave it. */
export interface LeaseEntry {
  readonly lease: Lease;
  readonly exit: () => Promise<void>;
}

/** The engine behind a `LeaseService` and the `@Exclusive` door. */
export interface ServiceEngine {
  readonly events$: Observable<LeaseEvent>;
  /** The resolved settings, flat (`LeaseService.options` shows them grouped). */
  readonly options: EngineSettings;
  init(): Promise<void>;
  close(): Promise<void>;
  /**
   * Acquire as `run` and `@Exclusive` do: reentrant; one attempt (`'throw'`, `'skip'`: `LeaseBusyError` when refused)
   * or a wait in line (`'wait'`, `'preempt'`). The call is checked already (options/busy-policy.ts).
   */
  enter(call: LeaseCall): Promise<LeaseEntry>;
  /** Runs `work` with `lease` as the current lease of its call chain. */
  within<T>(lease: Lease, work: () => T): T;
  /** Fenced transactions; `fencedAll` is a multi-key run's `MultiLease.fenced()` (engine/multi-fence.ts). */
  readonly fencing: Pick<FencedTransactions, 'fencedAll'>;
  /** A borrowed view of the lease the current call chain holds on `targetKey` (a nested call reuses it), if any. */
  borrow(targetKey: string): Lease | undefined;
  /** `run` and `@Exclusive` with `onBusy: 'join'`: the outcome of the run of the same key already going. */
  joinRun<T>(call: LeaseCall, work: (lease: Lease) => Promise<T> | T): Promise<T>;
  tryAcquire(request: LeaseRequest): Promise<Lease | null>;
  acquire(call: LeaseCall<WaitingPlan>): Promise<Lease>;
  current(): Lease | undefined;
  list(targetKey?: string): Promise<LeaseSnapshot[]>;
  heldLeases(): Lease[];
  waitingCount(): number;
  /** Publishes an event on `events$` (and its diagnostics channel): leader election's `elected` / `revoked`. */
  emit(event: LeaseEvent): void;
  /** Whether an event of `type` has a listener: a frequent one (a sticky call's `busy`) is built only then. */
  hears(type: LeaseEventType): boolean;
}
