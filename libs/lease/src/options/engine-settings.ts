/**
 * The module's options resolved into one flat, private record: what the engine, the store and the connections read
 * (`settings.heartbeatIntervalMs`). Derived once from the grouped `LeaseModuleOptions` by `resolveLeaseOptions`; the
 * public view of the same values is the grouped `ResolvedLeaseOptions` (`LeaseService.options`).
 */
import type { DataSourceOptions } from 'typeorm';

export interface EngineSettings {
  readonly heartbeatIntervalMs: number;
  readonly leaseTimeoutMs: number;
  readonly safetyMarginMs: number;
  readonly waiterTimeoutMs: number;
  /** A waiter renews every third of waiterTimeoutMs (at least 10 ms). */
  readonly waiterHeartbeatIntervalMs: number;
  readonly defaultWaitTimeoutMs: number;
  readonly joinResultTtlMs: number;
  readonly preemptGraceMs: number;
  readonly waitPollIntervalMs: number;
  readonly notify: boolean;
  readonly traceTargetKeys: boolean;
  readonly journal: boolean;
  readonly maxWaitersPerTarget: number;
  readonly maxWaitersPerProcess: number;
  /** null when aging is off. */
  readonly agingIntervalMs: number | null;
  readonly schema: string;
  readonly tableName: string;
  readonly waiterTableName: string;
  readonly createSchema: boolean;
  readonly owner: string;
  readonly fencedIdleTimeoutMs: number;
  readonly asyncReleaseCommits: boolean;
  readonly maxBatchSize: number;
  readonly poolSize: number;
  readonly pooler: 'none' | 'transaction';
  /** null: heartbeats and LISTEN use the application's DataSource settings. */
  readonly sessionUrl: string | null;
  readonly shutdownGraceMs: number;
  /** null: the default DataSource (or the module's own, with `dataSource`). */
  readonly dataSourceName: string | null;
  /** null: the module reuses a DataSource of the application's. */
  readonly dataSource: DataSourceOptions | null;
}
