/**
 * What the doors (`LeaseService`'s methods, `@Exclusive` through the explorer and the registry) need of an engine:
 * the real one (`LeaseEngine`, PostgreSQL rows) and the in-memory one of `nest-pg-lease/testing` implement it, each
 * on its own. Types and one brand only: the doors never depend on how an engine keeps its leases.
 */
import type { Observable } from 'rxjs';
import type { AcquireOptions, RunOptions, TryAcquireOptions } from '../interfaces/acquire-options.interface.js';
import type { LeaseEvent, LeaseSnapshot } from '../interfaces/lease-event.interface.js';
import type { ResolvedLeaseOptions } from '../interfaces/lease-module-options.interface.js';
import type { Lease } from '../interfaces/lease.interface.js';

/** A lease entered by `run` or `@Exclusive`, and how to leave it. */
export interface LeaseEntry {
  readonly lease: Lease;
  readonly exit: () => Promise<void>;
}

/** The engine behind a `LeaseService` and the `@Exclusive` door. */
export interface ServiceEngine {
  readonly events$: Observable<LeaseEvent>;
  readonly options: ResolvedLeaseOptions;
  init(): Promise<void>;
  close(): Promise<void>;
  /** Acquire as `run` and `@Exclusive` do: reentrant, waiting only when a priority or waitTimeoutMs is given. */
  enter(targetKey: string, options?: AcquireOptions): Promise<LeaseEntry>;
  /** Runs `work` with `lease` as the current lease of its call chain. */
  within<T>(lease: Lease, work: () => T): T;
  /** A borrowed view of the lease the current call chain holds on `targetKey` (a nested call reuses it), if any. */
  borrow(targetKey: string): Lease | undefined;
  /** `run` and `@Exclusive` with `onBusy: 'join'`: the outcome of the run of the same key already going. */
  joinRun<T>(targetKey: string, work: (lease: Lease) => Promise<T> | T, options: RunOptions): Promise<T>;
  tryAcquire(targetKey: string, options?: TryAcquireOptions): Promise<Lease | null>;
  acquire(targetKey: string, options?: AcquireOptions): Promise<Lease>;
  current(): Lease | undefined;
  list(targetKey?: string): Promise<LeaseSnapshot[]>;
  heldLeases(): Lease[];
  waitingCount(): number;
  /** Publishes an event on `events$` (and its diagnostics channel): leader election's `elected` / `revoked`. */
  emit(event: LeaseEvent): void;
}

/** Engines other than `LeaseEngine` that a `LeaseService` may face (`LeaseService`'s constructor tells them apart). */
const engines = new WeakSet<object>();

/** Marks `engine` as one a `LeaseService` may be built over (the in-memory engine's constructor calls it). */
export function markServiceEngine(engine: ServiceEngine): void {
  engines.add(engine);
}

export function isMarkedServiceEngine(value: unknown): value is ServiceEngine {
  return typeof value === 'object' && value !== null && engines.has(value);
}
