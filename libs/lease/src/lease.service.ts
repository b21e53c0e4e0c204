import type { Observable } from 'rxjs';
import type { DataSource } from 'typeorm';
import type { Lease } from './interfaces/lease.interface.js';
import type { LeaseDataSourceRef } from './database/lease-database.js';
import { LeaseEngine } from './engine/lease-engine.js';
import { bindEngine, candidatesOf, engineOf } from './engine-of.js';
import type { LeaseModuleOptions, ResolvedLeaseOptions } from './interfaces/lease-module-options.interface.js';
import type { AcquireOptions, RunOptions, TryAcquireOptions } from './interfaces/acquire-options.interface.js';
import type { LeaseEvent, LeaseSnapshot } from './interfaces/lease-event.interface.js';
import type { ElectOptions, Leadership } from './interfaces/leader-election.interface.js';
import { LeaderCandidates } from './leader/candidates.js';
import { elect } from './leader/elect.js';
import { acquireCall, runCall, tryAcquireRequest } from './options/busy-policy.js';
import { withinTiming } from './options/lease-timeout.js';
import { groupedOptions } from './options/option-groups.js';
import type { MultiLease, MultiRunOptions } from './interfaces/multi-lease.interface.js';
import { multiKeyCalls, runMultiKey } from './engine/multi-key-run.js';

/**
 * Heartbeat leases in PostgreSQL rows: `run`, `tryAcquire`, `acquire`, `current`, `list`, and the process's local
 * view (`heldLeases`, `waitingCount`, `events$`, `options`). Inject it wherever `LeaseModule` is imported.
 *
 * Outside Nest (scripts, workers, tests): `const leases = new LeaseService(dataSource, options); await leases.init();`
 * … `await leases.close();` — the DataSource must be PostgreSQL; `init()` initializes it if nobody has.
 */
export class LeaseService {
  /** acquired, taken-over, renewed, renew-failed, lost, released, busy, waiting, wait-ended, elected, revoked. */
  readonly events$: Observable<LeaseEvent>;
  /** The resolved options (defaults applied), grouped as given: `options.timing.leaseTimeoutMs`, `options.owner`. */
  readonly options: ResolvedLeaseOptions;

  /** A service of its own, outside Nest: call `init()` before use and `close()` at the end. */
  constructor(dataSource: DataSource, options?: LeaseModuleOptions);
  /** @internal Nest's: the module's engine (or a DataSource resolved at bootstrap; or the testing kit's engine over its memory backend). */
  constructor(source: LeaseEngine | DataSource | LeaseDataSourceRef, options?: LeaseModuleOptions);
  constructor(source: LeaseEngine | DataSource | LeaseDataSourceRef, options: LeaseModuleOptions = {}) {
    const engine = source instanceof LeaseEngine ? source : new LeaseEngine(source, options);
    bindEngine(this, engine, new LeaderCandidates(engine));
    this.events$ = engine.events$;
    this.options = groupedOptions(engine.options);
  }

  /**
   * Resolves and checks the DataSource, the tables (creating them when `createSchema` is set) and the role's rights.
   * Nest calls it at bootstrap; call it yourself outside Nest.
   */
  init(): Promise<void> {
    return engineOf(this).init();
  }

  /**
   * Refuses new calls, cancels every wait and removes its row, lets the leases in use finish for up to
   * `shutdownGraceMs` (docs/shutdown.md), then aborts and releases what is still held; waits (up to one
   * heartbeat interval) for acquisitions in flight. Stops every leader-election candidate meanwhile: a leader hands
   * its term over at once. Idempotent. Nest calls it at shutdown; call it yourself outside Nest.
   */
  close(): Promise<void> {
    return candidatesOf(this).closeWithEngine();
  }

  /**
   * Runs `work` under the lease: acquire, heartbeat while it runs, release when it settles. Reentrant within one call
   * chain. A busy target does what `onBusy` says: `'throw'` a `LeaseBusyError` (the default), `'wait'` in line,
   * `'join'` the run holding it (its outcome is this call's), `'preempt'` a holder of lower priority
   * (docs/preemption.md). See `RunOptions`.
   */
  async run<T>(targetKey: string, work: (lease: Lease) => Promise<T> | T, options?: RunOptions): Promise<T>;
  /**
   * Runs `work` under a lease on every key of `targetKeys` (at most 16, each once), taken all or none in one global
   * order (so callers with overlapping sets never deadlock), released together when `work` settles; the work's
   * `MultiLease` aborts its signal when any lease is lost and fences writes with every token (docs/multi-key.md).
   * `onBusy`: `'throw'` (the default; the keys taken are given back) or `'wait'`. See `MultiRunOptions`.
   */
  async run<T>(
    targetKeys: readonly string[],
    work: (lease: MultiLease) => Promise<T> | T,
    options?: MultiRunOptions,
  ): Promise<T>;
  async run<T>(
    target: string | readonly string[],
    work: ((lease: Lease) => Promise<T> | T) | ((lease: MultiLease) => Promise<T> | T),
    options: RunOptions | MultiRunOptions = {},
  ): Promise<T> {
    const engine = engineOf(this);
    if (Array.isArray(target)) {
      const calls = multiKeyCalls(target, options as MultiRunOptions, engine.options);
      return runMultiKey(engine, calls, work as (lease: MultiLease) => Promise<T> | T);
    }
    // A single key (checked as one: a value that is neither is refused with LeaseKeyError).
    const call = withinTiming(runCall(target, options), engine.options);
    const single = work as (lease: Lease) => Promise<T> | T;
    if (call.busy.kind === 'join') return engine.joinRun(call, single);
    const { lease, exit } = await engine.enter(call);
    try {
      return await engine.within(lease, () => single(lease));
    } finally {
      await exit();
    }
  }

  /**
   * One attempt: the lease, or null when the target is held (and not expired) or a live waiter is ahead of a newcomer
   * with this priority. Always asks the database, except inside a call chain that already holds the key (reentrant:
   * then `holdAtLeastMs` is the outer acquisition's).
   */
  async tryAcquire(targetKey: string, options: TryAcquireOptions = {}): Promise<Lease | null> {
    const engine = engineOf(this);
    return engine.tryAcquire(withinTiming(tryAcquireRequest(targetKey, options), engine.options));
  }

  /**
   * Acquires, waiting in the priority line when the target is busy: highest priority first, first come first served
   * within a priority. Rejects with `LeaseWaitTimeoutError` after the wait's `timeoutMs`, or with the signal's reason.
   * `onBusy: 'preempt'` takes the target over from a holder of lower priority instead (docs/preemption.md).
   */
  async acquire(targetKey: string, options: AcquireOptions = {}): Promise<Lease> {
    const engine = engineOf(this);
    return engine.acquire(withinTiming(acquireCall(targetKey, options), engine.options));
  }

  /**
   * Stands for leadership of `targetKey`: a candidate in its priority line, elected when granted the lease, revoked
   * when the lease is lost (then in line again) or released by `stop()`. Never rejects after its input is checked.
   */
  elect(targetKey: string, options: ElectOptions = {}): Leadership {
    return elect(candidatesOf(this), targetKey, options);
  }

  /** The lease of the surrounding `run` / `@Exclusive` call (innermost), if any. */
  current(): Lease | undefined {
    return engineOf(this).current();
  }

  /** Holders and waiters (each target's waiters in grant order), for dashboards and health checks. */
  list(targetKey?: string): Promise<LeaseSnapshot[]> {
    return engineOf(this).list(targetKey);
  }

  /** Leases this process holds now (local view; no database call). */
  heldLeases(): Lease[] {
    return engineOf(this).heldLeases();
  }

  /** Number of waiting calls in this process (local view; no database call). */
  waitingCount(): number {
    return engineOf(this).waitingCount();
  }
}
