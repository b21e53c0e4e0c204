/**
 * The PostgreSQL backend: `LeaseBackend` over today's store and database classes (an adapter). The connections (the
 * statement pool, the two heartbeat connections, LISTEN), group commit, the lone path, the statements' bounds and
 * the pooler's framing are its own; the core sees only the contract.
 */
import type { Logger } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { DedicatedConnection } from '../../database/dedicated-connection.js';
import { LeaseDatabase, type LeaseDataSourceRef } from '../../database/lease-database.js';
import { Notifier } from '../../database/notifier.js';
import { connectBoundMs, connectionCloseMs } from '../../options/bounds.js';
import type { EngineSettings } from '../../options/engine-settings.js';
import { JoinResults } from '../../store/remote-joins.js';
import { LeaseStore } from '../../store/lease-store.js';
import { OperatorStore } from '../../store/operator-store.js';
import type { WaiterStore } from '../../store/waiter-store.js';
import { timelineOf } from '../../store/sql/fencing-token.js';
import type { StatementFaults } from '../../store/sql/statement-faults.js';
import type { LeaseHistory } from '../../store/store.types.js';
import type {
  AcquiredRow,
  AcquiredSlot,
  AcquireRequest,
  BackendFactory,
  FenceBackend,
  LeaseBackend,
  OperatorBackend,
  PreemptBackend,
  Refusal,
  RemoteJoins,
  RenewResult,
  RowRef,
  SlotRefusal,
  SnapshotRow,
  WaiterBackend,
  WakeupListener,
  Wakeups,
} from '../backend.js';
import { BootstrapChecks } from './bootstrap-checks.js';

export type { LeaseDataSourceRef };

/** The backend of an engine: over PostgreSQL (a DataSource, or the module's reference to one), or what `source` builds. */
export function backendFor(
  source: DataSource | LeaseDataSourceRef | BackendFactory,
  options: EngineSettings,
  logger: Logger,
): LeaseBackend {
  return typeof source === 'function' ? source(options, logger) : new PostgresBackend(source, options, logger);
}

export class PostgresBackend implements LeaseBackend {
  readonly waiters: WaiterBackend;
  readonly fence: FenceBackend;
  readonly preempt: PreemptBackend;
  readonly joins: RemoteJoins;
  readonly operator: OperatorBackend;
  private readonly database: LeaseDatabase;
  private readonly store: LeaseStore;
  private readonly heartbeatConnection: DedicatedConnection;
  private readonly waiterHeartbeatConnection: DedicatedConnection;
  private readonly checks: BootstrapChecks;

  constructor(
    dataSource: DataSource | LeaseDataSourceRef,
    private readonly options: EngineSettings,
    private readonly logger: Logger,
  ) {
    this.database = new LeaseDatabase(dataSource, options);
    // Outside a transaction pooler the heartbeat connections are sessions of their own: bounded by session settings,
    // a renewal is one statement, one round trip. Through the pooler each renewal frames its own bounds.
    const ownSessions = options.pooler !== 'transaction' || options.sessionUrl !== null;
    const { heartbeatIntervalMs, waiterHeartbeatIntervalMs } = options;
    const closeMs = connectionCloseMs(options);
    // Opening a connection may take longer than a tick (a busy server's fork and authentication): the tick fails, the
    // connection goes on opening within its own bound, and the next tick uses it. Cut at every tick instead, a
    // connection slower than one interval would never open, and every lease would be lost.
    const connectMs = connectBoundMs(options);
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
      options,
      this.waiterHeartbeatConnection,
    );
    this.waiters = this.store.waiters;
    this.preempt = this.store.preempt;
    const { fence } = this.store;
    this.fence = {
      // BEGIN and the lock in one message; the release, when asked, in the COMMIT's.
      transaction: (row, lockWaitMs, work) =>
        this.database.transaction(
          () => fence.lockStatement(row, lockWaitMs()),
          async (manager, opened) => {
            const { result, releaseToken } = await work(manager, fence.locked(opened));
            return {
              result,
              closing: releaseToken === undefined ? undefined : fence.releaseStatement(row, releaseToken),
            };
          },
          (error) => fence.lockFailed(error, row),
        ),
      timelineOf,
      // Every row locked by the one statement sent with BEGIN, in the order given.
      transactionAll: (rows, lockWaitMs, work) =>
        this.database.transaction(
          () => fence.lockManyStatement(rows, lockWaitMs()),
          async (manager, opened) => ({ result: await work(manager, fence.lockedMany(opened)) }),
          (error) => fence.lockFailed(error, rows[0]),
        ),
    };
    this.joins = new JoinResults(this.database, options, logger);
    const operator = new OperatorStore(this.database.statements, options);
    this.operator = Object.assign(operator, { missingTable: (error: unknown) => OperatorStore.missingTable(error) });
    this.checks = new BootstrapChecks(this.database, this.store, options, logger);
    // Every call's two statements: the store's own methods, no forwarding frame in between.
    this.attempt = this.store.tryAcquire.bind(this.store);
    this.release = this.store.release.bind(this.store);
    this.releaseAndPark = this.store.waiters.releaseAndPark.bind(this.store.waiters);
  }

  readonly attempt: (request: AcquireRequest, onBatch?: (size: number) => void) => Promise<AcquiredRow | Refusal>;
  readonly release: (row: RowRef, leaseToken: string, timeoutMs: number, lone?: boolean) => Promise<boolean>;
  readonly releaseAndPark: WaiterStore['releaseAndPark'];

  open(): Promise<string | null> {
    return this.checks.run();
  }

  settleAgain(): Promise<void> {
    return this.checks.settleAgain();
  }

  attemptSlot(
    request: AcquireRequest,
    limit: number,
    onBatch?: (size: number) => void,
  ): Promise<AcquiredSlot | SlotRefusal> {
    return this.store.slots.tryAcquire(request, limit, onBatch);
  }

  renew(
    rows: readonly RowRef[],
    leaseTokens: string[],
    timeoutMs: number,
    history?: LeaseHistory,
  ): Promise<RenewResult> {
    return this.store.renew(rows, leaseTokens, timeoutMs, history);
  }

  snapshot(targetKey?: string): Promise<SnapshotRow[]> {
    return this.store.snapshot(targetKey);
  }

  purge(stop: () => boolean): Promise<number> {
    return this.store.purge(stop);
  }

  wakeups(listener: WakeupListener, retryMs: number): Wakeups {
    return new Notifier(
      () => this.database.sessionConfig('listen'),
      this.store.channel,
      (key) => listener.line(key),
      () => listener.all(),
      this.logger,
      retryMs,
      { channel: this.store.headChannel, onHead: (waiterId, key, grant) => listener.head(waiterId, key, grant) },
    );
  }

  useStatementFaults(faults: StatementFaults): void {
    this.store.useStatementFaults(faults);
  }

  async closeHeartbeats(): Promise<void> {
    await Promise.all([this.heartbeatConnection.close(), this.waiterHeartbeatConnection.close()]);
  }

  close(): Promise<void> {
    return this.database.close();
  }
}
