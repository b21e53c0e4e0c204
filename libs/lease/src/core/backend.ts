/**
 * The contract between the acquisition core (`engine/`) and where the rows live (issue 39): what the core asks of a
 * backend, and nothing of how it is done. The PostgreSQL backend (`core/postgres/postgres-backend.ts`) implements it
 * over the store and the database classes — group commit, the lone path, the statement pool, the statements' bounds
 * and the pooler's framing stay inside it. The core keeps the timers (heartbeats, polls), the local line, the
 * leases' signals and events; a backend answers questions about rows and tells the core when a line may have moved.
 *
 * The row types are the store's (type-only re-exports): they are the shapes both sides agree on.
 */
import type { Logger } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import type { EngineSettings } from '../options/engine-settings.js';
import type { OperatorStore } from '../store/operator-store.js';
import type { AskedGrant, PreemptedRow, Preemptor } from '../store/preempt-store.js';
import type { AcquiredSlot, SlotRefusal } from '../store/semaphore-store.js';
import type {
  AcquiredRow,
  AcquireRequest,
  LeaseHistory,
  ParkedRelease,
  ParkRequest,
  Refusal,
  RenewedRow,
  RenewResult,
  RowRef,
  ServerHistory,
  SnapshotRow,
  WaiterPlace,
} from '../store/store.types.js';
import type { StatementFaults } from '../store/sql/statement-faults.js';
import type { RemoteJoins } from '../store/remote-joins.js';

export type {
  AcquiredRow,
  AcquireRequest,
  AcquiredSlot,
  AskedGrant,
  LeaseHistory,
  ParkedRelease,
  ParkRequest,
  PreemptedRow,
  Preemptor,
  Refusal,
  RemoteJoins,
  RenewedRow,
  RenewResult,
  RowRef,
  ServerHistory,
  SlotRefusal,
  SnapshotRow,
  StatementFaults,
  WaiterPlace,
};
export type { JournalRow } from '../store/operator-store.js';
export type { JoinLook, JoinOutcome, JoinWatch, SettledOutcome } from '../store/remote-joins.js';

/** A waiting call as the backend knows it: its key and id (its lease token once granted). */
export interface WaiterRef {
  readonly targetKey: string;
  readonly id: string;
}

/** The waiters' rows: a place in the key's line, kept alive by the core's waiter heartbeat. */
export interface WaiterBackend {
  /** Queues `waiterId` (at `place` again after an eviction); null when the key's line is full. */
  enqueue(
    targetKey: string,
    waiterId: string,
    priority: number,
    place: WaiterPlace | undefined,
    limitMs: number,
  ): Promise<WaiterPlace | null>;
  /** Removes a waiter's row (a grant handed to it meanwhile is passed on). */
  dequeue(targetKey: string, waiterId: string): Promise<void>;
  dequeueAll(waiters: readonly WaiterRef[]): Promise<void>;
  /** Renews waiters' rows; the ids still queued (or granted). */
  renew(targetKeys: string[], waiterIds: string[], timeoutMs: number): Promise<Set<string>>;
  /**
   * Confirms a grant a release handed the waiter (direct handoff), with its call's lease length (absent: the module's);
   * null when it was passed on meanwhile.
   */
  confirmGrant(
    targetKey: string,
    waiterId: string,
    holdMs: number,
    leaseTimeoutMs?: number,
  ): Promise<AcquiredRow | null>;
}

/** What a fenced transaction's lock read of the lease row: who holds it, and on which timeline. */
export interface FenceLock {
  leaseToken: string | null;
  timeline: bigint;
  /** Released by an operator (`LeaseOperator.forceRelease`). */
  forced: boolean;
  /** The lease token a preempting caller asked to stop. */
  preemptOf: string | null;
}

/** How a fenced transaction's work ended: its result, and the token whose row the COMMIT releases (`release: true`). */
export interface FenceOutcome<T> {
  result: T;
  releaseToken?: string;
}

/** A lease's fenced transaction: the work runs in the transaction that holds the lease row's lock. */
export interface FenceBackend {
  /**
   * Opens a transaction that locks `row` first (waiting at most `lockWaitMs()`, read when the lock is sent) and runs
   * `work` with what the lock read; commits, releasing the row with the commit when `work` names a `releaseToken`
   * (its token is the lock's: the row lock held since cannot find another holder's). Rejects with the lock's error
   * before `work` runs when the lock step fails; with `work`'s own error unchanged, the transaction rolled back.
   */
  transaction<T>(
    row: RowRef,
    lockWaitMs: () => number,
    work: (manager: EntityManager, locked: FenceLock) => Promise<FenceOutcome<T>>,
  ): Promise<T>;
  /** The timeline a fencing token was issued on. */
  timelineOf(fencingToken: bigint): bigint;
  /**
   * `transaction` over several rows (`MultiLease.fenced()`): locks `rows` one by one in the order given (the global key
   * order of a multi-key run: two such transactions never wait for each other in a cycle) and runs `work` with one
   * lock per row, in that order. No release rides on its COMMIT.
   */
  transactionAll<T>(
    rows: readonly RowRef[],
    lockWaitMs: () => number,
    work: (manager: EntityManager, locked: readonly FenceLock[]) => Promise<T>,
  ): Promise<T>;
}

/** Preemption: ask the live holder to stop, then take the key once its grace ends. */
export interface PreemptBackend {
  ask(caller: Preemptor): Promise<AskedGrant | null>;
  take(caller: Preemptor, leaseToken: string, holdMs: number, asked: AskedGrant): Promise<PreemptedRow | null>;
}

/** The operator's rows (drains, the journal, force-release, history): what `LeaseOperator` and the core use. */
export type OperatorBackend = Pick<
  OperatorStore,
  'forceRelease' | 'drain' | 'undrain' | 'drains' | 'audit' | 'history' | 'writeJournal' | 'trimJournal'
> & {
  /** Whether `error` says the operator's tables are missing (an older schema): the features stay off. */
  missingTable(error: unknown): boolean;
};

/** What a backend tells the core: a key's line may have moved, every line may have, a waiter was named. */
export interface WakeupListener {
  line(targetKey: string): void;
  all(): void;
  /** The head of a line was named (with the fencing token of a grant handed to it, if any). */
  head(waiterId: string, targetKey: string, grant?: bigint): void;
}

/** A subscription to wake-ups: `start` resolves when listening (or when it failed: the core's polls cover it). */
export interface Wakeups {
  start(): Promise<void>;
  close(): Promise<void>;
}

/** Builds an engine's backend from its resolved options (the testing kit's memory backend, say). */
export type BackendFactory = (options: EngineSettings, logger: Logger) => LeaseBackend;

export interface LeaseBackend {
  /** Bootstrap: connections, checks, tables; resolves with the system identifier the leases live under (or null). */
  open(): Promise<string | null>;
  /** A renewal found another system (a failover): settle what the new system needs (token floors). */
  settleAgain(): Promise<void>;
  /** One acquisition attempt for a single holder: a grant, or a refusal (queued as `queueAs` when asked). */
  attempt(request: AcquireRequest, onBatch?: (size: number) => void): Promise<AcquiredRow | Refusal>;
  /** One attempt on a key with `limit` slots (a semaphore; `onBatch` as `attempt`'s). */
  attemptSlot(
    request: AcquireRequest,
    limit: number,
    onBatch?: (size: number) => void,
  ): Promise<AcquiredSlot | SlotRefusal>;
  readonly waiters: WaiterBackend;
  /** Renews this process's leases at once, each row keeping its own lease length. */
  renew(
    rows: readonly RenewedRow[],
    leaseTokens: string[],
    timeoutMs: number,
    history?: LeaseHistory,
  ): Promise<RenewResult>;
  /** Token-guarded release (idempotent); whether the row was released now. */
  release(row: RowRef, leaseToken: string, timeoutMs: number, lone?: boolean): Promise<boolean>;
  /**
   * The release of a key's own row that, when it hands the key to a waiter, also queues `park` for this process at the
   * end of its priority, in the same commit (the hot key's re-queue, see `WaitQueue.parkFor`). Part of direct handoff: a
   * backend without it (the testing kit's memory) has none, and the core never parks there.
   */
  releaseAndPark?(targetKey: string, leaseToken: string, timeoutMs: number, park: ParkRequest): Promise<ParkedRelease>;
  readonly fence: FenceBackend;
  readonly preempt: PreemptBackend;
  /** Other processes' outcomes for `onBusy: 'join'`; none: joins within this process only. */
  readonly joins?: RemoteJoins;
  readonly operator: OperatorBackend;
  /** Holders and waiters, each key's waiters in grant order. */
  snapshot(targetKey?: string): Promise<SnapshotRow[]>;
  /** Removes free rows (until `stop` says so); how many. */
  purge(stop: () => boolean): Promise<number>;
  /** Wake-ups for the core's waiters (`retryMs`: how long a listening attempt may take). */
  wakeups(listener: WakeupListener, retryMs: number): Wakeups;
  /** Test-only defects of the statements (the fault schedule's negative controls). */
  useStatementFaults?(faults: StatementFaults): void;
  /** Closes the heartbeat connections; then, after the core's last flush, `close`. */
  closeHeartbeats(): Promise<void>;
  close(): Promise<void>;
}
