/**
 * The module's options (`LeaseModule.forRoot()`, a hand-made `LeaseService`), grouped by concern, and what they
 * resolve to.
 */
import type { DataSourceOptions } from 'typeorm';

/** How often, how long: heartbeats, timeouts, graces (every value in milliseconds). */
interface LeaseTimingOptions {
  /**
   * How often the holder renews its leases (one batched statement per tick for all of them).
   * @default 30_000
   */
  heartbeatIntervalMs?: number;
  /**
   * How long after its last renewal (database clock) a lease may be taken over. At least 3 × heartbeatIntervalMs.
   * @default 120_000
   */
  leaseTimeoutMs?: number;
  /**
   * The holder treats its lease as lost once `leaseTimeoutMs − safetyMarginMs` has passed since its last confirmed
   * renewal was sent (monotonic clock), i.e. before anyone else may take it over. Must leave room for two
   * heartbeats: `2 × heartbeatIntervalMs ≤ leaseTimeoutMs − safetyMarginMs`.
   * @default heartbeatIntervalMs
   */
  safetyMarginMs?: number;
  /**
   * A waiter whose own heartbeat is older than this is skipped and removed. Waiters renew every third of it.
   * @default 15_000
   */
  waiterTimeoutMs?: number;
  /**
   * How long a waiting call (`onBusy: 'wait'`, `acquire()`), a join or a preemption waits when its policy gives no
   * timeout.
   * @default 60_000
   */
  defaultWaitTimeoutMs?: number;
  /**
   * Fallback poll of a waiting call, jittered between half and all of it. NOTIFY wakes waiters sooner; the poll covers
   * expired holders (which send no NOTIFY) and missed notifications.
   * @default heartbeatIntervalMs; behind `pooler: 'transaction'` without `sessionUrl` (no NOTIFY),
   * min(heartbeatIntervalMs, 1_000)
   */
  waitPollIntervalMs?: number;
  /**
   * How long a preempting call (`onBusy: 'preempt'`) waits for the holder it asked to stop to release, before it takes
   * the target over regardless (a higher fencing token: the holder's fenced writes are refused from then on). A
   * holder in another process hears of it at its next renewal, so keep it above heartbeatIntervalMs. Per call:
   * `onBusy: { preempt: { graceMs } }`. A non-negative integer (0: take over at once).
   * @default 2 × heartbeatIntervalMs
   */
  preemptGraceMs?: number;
  /**
   * How long the outcome of a joinable run (`onBusy: 'join'`) is kept for joiners in other processes, from when it
   * was stored (database clock); expired results are deleted by later runs' saves.
   * @default 60_000
   */
  joinResultTtlMs?: number;
  /**
   * How long shutdown (`close()`, Nest's `beforeApplicationShutdown` on SIGTERM) lets the work in progress finish: a
   * `run` / `@Exclusive` call, or a handle from `acquire()` / `tryAcquire()` not yet released, keeps its lease and its
   * heartbeats until it ends or this passes; only then is its signal aborted (`LeaseShutdownError`) and its lease
   * released. New calls are refused and waits settled from the start. 0: abort and release at once. The default
   * leaves 5 s of Kubernetes' 30 s `terminationGracePeriodSeconds` for the release and the rest of the shutdown.
   * @default 25_000
   */
  shutdownGraceMs?: number;
  /**
   * Idle time allowed inside a fenced transaction before PostgreSQL ends the session
   * (`idle_in_transaction_session_timeout`), so a paused holder cannot block a takeover for longer. At most
   * 2 × leaseTimeoutMs − safetyMarginMs − 2 × heartbeatIntervalMs, so a blocked taker still gets a usable lease.
   * @default leaseTimeoutMs
   */
  fencedIdleTimeoutMs?: number;
  /**
   * Opt-in aging against starvation: a waiter's effective priority grows by one for every `agingIntervalMs` it has
   * waited since it first queued. Off by default (strict priority).
   * @default undefined (off)
   */
  agingIntervalMs?: number;
}

/** Which DataSource, and the connections and statements of the library over it. */
interface LeaseConnectionOptions {
  /**
   * Name of the `@nestjs/typeorm` DataSource to reuse.
   * @default the default DataSource
   */
  dataSourceName?: string;
  /**
   * TypeORM options for a DataSource the module creates, owns and destroys on shutdown (instead of reusing one).
   */
  dataSource?: DataSourceOptions;
  /**
   * Connections of the library's own for its statements (acquisitions, releases, waiter changes, reads), opened as
   * needed and closed when idle, with the DataSource's connection settings: every statement on them is bounded on the
   * server and durable whatever the role's defaults (see docs/bounds.md). `fenced()` runs on the DataSource's
   * own pool; heartbeats and LISTEN have one connection each besides.
   * @default 10
   */
  poolSize?: number;
  /**
   * Group commit: while an acquisition (or a release) of this process is in flight, further ones queue and then go
   * together in one statement and one commit, at most this many at once. A lone call is sent at once, alone. 1 turns
   * batching off (every call its own statement and commit); at most 1,000 (a batch locks its rows in one statement).
   * @default 64
   */
  maxBatchSize?: number;
  /**
   * The connection pooler between the application's DataSource and PostgreSQL. `'transaction'` (PgBouncer's
   * `pool_mode = transaction`, and poolers like it): no named prepared statements (they would leak between clients
   * sharing a server connection) and no session state outside a transaction; LISTEN/NOTIFY only through `sessionUrl`.
   * @default 'none'
   */
  pooler?: 'none' | 'transaction';
  /**
   * A connection string reaching PostgreSQL directly or through a session-mode pooler, for the lease heartbeat, waiter
   * heartbeat and LISTEN connections (three per process): a saturated transaction pooler then cannot delay renewals
   * and cost healthy leases, and NOTIFY wake-ups work. Acquisitions, releases and `fenced()` stay on the application's
   * DataSource. Without it behind `pooler: 'transaction'`, heartbeats go through the pooler and `notify` is off
   * (waiters poll).
   * @default undefined (the application's DataSource settings)
   */
  sessionUrl?: string;
  /**
   * Wake waiters with LISTEN/NOTIFY (one listening connection per process). Turn off behind poolers that do not
   * support LISTEN; waiters then rely on polling.
   * @default true; false behind `pooler: 'transaction'` without `sessionUrl`
   */
  notify?: boolean;
  /**
   * Opt-in faster releases: a release commits without waiting for the WAL flush (`synchronous_commit = off` for that
   * statement only). A database crash can then undo a release, which only delays the next holder until the lease
   * expires. Acquisitions (they hand out fencing tokens), heartbeats (the local deadline counts from them) and fenced
   * writes stay fully durable, so every guarantee is unchanged.
   * @default false
   */
  asyncReleaseCommits?: boolean;
}

/** Where the lease tables are, and whether the module creates them. */
interface LeaseTableOptions {
  /**
   * Schema of the lease tables.
   * @default 'public'
   */
  schema?: string;
  /**
   * Lease table.
   * @default 'job_lease'
   */
  tableName?: string;
  /**
   * Waiter table.
   * @default 'job_lease_waiter'
   */
  waiterTableName?: string;
  /**
   * Create the tables at bootstrap if they are missing (the same statements as `leaseMigrations`). Off by default:
   * add `leaseMigrations` to your DataSource's migrations instead.
   * @default false
   */
  createSchema?: boolean;
}

/** Bounds of the priority lines. */
interface LeaseLimitOptions {
  /**
   * At most this many live waiters per target; a further waiting call is refused with `LeaseQueueFullError`. A soft
   * bound: waiters enqueuing at the same instant may overshoot it by a few.
   * @default 1_000
   */
  maxWaitersPerTarget?: number;
  /**
   * At most this many waiting calls in this process at once.
   * @default 10_000
   */
  maxWaitersPerProcess?: number;
}

/** What traces and the journal record. */
interface LeaseObservabilityOptions {
  /**
   * Whether the spans of the library (`lease.acquire`, `lease.wait`, `lease.fenced`, `lease.release`) carry the
   * target key itself as `lease.key`. Off by default: a key may be personal data (`report:user:42`); every span
   * carries the key's template (`lease.key_template`) either way.
   * @default false
   */
  traceTargetKeys?: boolean;
  /**
   * Whether this process journals its lease events (acquired, taken-over, lost with its reason, released, waiting,
   * wait-ended) to the journal table, for the operator's timeline (`LeaseOperator.history`, the console). Best-effort:
   * written in batches every 250 ms off the acquire path, at most 1,000 rows buffered (the oldest dropped beyond),
   * never failing a call; rows older than a day are trimmed. Turn it on in every process whose leases the timeline
   * should show.
   * @default false
   */
  journal?: boolean;
}

/** Options of `LeaseModule.forRoot()` / `forRootAsync()` and of a hand-made `LeaseService`, grouped by concern. */
export interface LeaseModuleOptions {
  /** How often, how long: heartbeats, timeouts, graces (every value in milliseconds). */
  timing?: LeaseTimingOptions;
  /** Which DataSource, and the connections and statements of the library over it. */
  connections?: LeaseConnectionOptions;
  /** Where the lease tables are, and whether the module creates them. */
  tables?: LeaseTableOptions;
  /** Bounds of the priority lines. */
  limits?: LeaseLimitOptions;
  /** What traces and the journal record. */
  observability?: LeaseObservabilityOptions;
  /**
   * Holder identity stored in `owner` (informational: ownership is proven by the lease token).
   * @default `${hostname}:${pid}:${random}`
   */
  owner?: string;
}

/** Options with every default applied and checked (`LeaseService.options`): every group and field present. */
export interface ResolvedLeaseOptions {
  readonly timing: {
    readonly heartbeatIntervalMs: number;
    readonly leaseTimeoutMs: number;
    readonly safetyMarginMs: number;
    readonly waiterTimeoutMs: number;
    readonly defaultWaitTimeoutMs: number;
    readonly waitPollIntervalMs: number;
    readonly preemptGraceMs: number;
    readonly joinResultTtlMs: number;
    readonly shutdownGraceMs: number;
    readonly fencedIdleTimeoutMs: number;
    /** null when aging is off. */
    readonly agingIntervalMs: number | null;
  };
  readonly connections: {
    /** null: the default DataSource (or the module's own, with `dataSource`). */
    readonly dataSourceName: string | null;
    /** null: the module reuses a DataSource of the application's. */
    readonly dataSource: Readonly<DataSourceOptions> | null;
    readonly poolSize: number;
    readonly maxBatchSize: number;
    readonly pooler: 'none' | 'transaction';
    /** null: heartbeats and LISTEN use the application's DataSource settings. */
    readonly sessionUrl: string | null;
    readonly notify: boolean;
    readonly asyncReleaseCommits: boolean;
  };
  readonly tables: {
    readonly schema: string;
    readonly tableName: string;
    readonly waiterTableName: string;
    readonly createSchema: boolean;
  };
  readonly limits: {
    readonly maxWaitersPerTarget: number;
    readonly maxWaitersPerProcess: number;
  };
  readonly observability: {
    readonly traceTargetKeys: boolean;
    readonly journal: boolean;
  };
  readonly owner: string;
}
