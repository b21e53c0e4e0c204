import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { DataSourceOptions } from 'typeorm';
import type { LeaseNames } from '../schema/lease-schema.js';
import { LeaseConfigError } from '../errors/lease.errors.js';
import { LONE_SURROGATE } from './call-input.js';

/** Options of `LeaseModule.forRoot()` / `forRootAsync()` and of a hand-made `LeaseService`. */
export interface LeaseModuleOptions {
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
   * How long `acquire()` / `run()` / `@Exclusive` with a priority wait when no waitTimeoutMs is given.
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
   * Wake waiters with LISTEN/NOTIFY (one listening connection per process). Turn off behind poolers that do not
   * support LISTEN; waiters then rely on polling.
   * @default true; false behind `pooler: 'transaction'` without `sessionUrl`
   */
  notify?: boolean;
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
  /**
   * Opt-in faster releases: a release commits without waiting for the WAL flush (`synchronous_commit = off` for that
   * statement only). A database crash can then undo a release, which only delays the next holder until the lease
   * expires. Acquisitions (they hand out fencing tokens), heartbeats (the local deadline counts from them) and fenced
   * writes stay fully durable, so every guarantee is unchanged.
   * @default false
   */
  asyncReleaseCommits?: boolean;
  /**
   * Group commit: while an acquisition (or a release) of this process is in flight, further ones queue and then go
   * together in one statement and one commit, at most this many at once. A lone call is sent at once, alone. 1 turns
   * batching off (every call its own statement and commit); at most 1,000 (a batch locks its rows in one statement).
   * @default 64
   */
  maxBatchSize?: number;
  /**
   * Connections of the library's own for its statements (acquisitions, releases, waiter changes, reads), opened as
   * needed and closed when idle, with the DataSource's connection settings: every statement on them is bounded on the
   * server and durable whatever the role's defaults (see the README, "Bounds"). `fenced()` runs on the DataSource's
   * own pool; heartbeats and LISTEN have one connection each besides.
   * @default 10
   */
  poolSize?: number;
  /**
   * Opt-in aging against starvation: a waiter's effective priority grows by one for every `agingIntervalMs` it has
   * waited since it first queued. Off by default (strict priority).
   * @default undefined (off)
   */
  agingIntervalMs?: number;
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
  /**
   * Holder identity stored in `owner` (informational: ownership is proven by the lease token).
   * @default `${hostname}:${pid}:${random}`
   */
  owner?: string;
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
   * Idle time allowed inside a fenced transaction before PostgreSQL ends the session
   * (`idle_in_transaction_session_timeout`), so a paused holder cannot block a takeover for longer. At most
   * 2 × leaseTimeoutMs − safetyMarginMs − 2 × heartbeatIntervalMs, so a blocked taker still gets a usable lease.
   * @default leaseTimeoutMs
   */
  fencedIdleTimeoutMs?: number;
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
}

/** Options with every default applied and checked. */
export interface ResolvedLeaseOptions {
  readonly heartbeatIntervalMs: number;
  readonly leaseTimeoutMs: number;
  readonly safetyMarginMs: number;
  readonly waiterTimeoutMs: number;
  readonly waiterHeartbeatIntervalMs: number;
  readonly defaultWaitTimeoutMs: number;
  readonly waitPollIntervalMs: number;
  readonly notify: boolean;
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
}

/** Fallback poll of waiters behind a transaction pooler without `sessionUrl`, where no NOTIFY can wake them. */
export const POOLER_POLL_INTERVAL_MS = 1_000;

export const DEFAULT_HEARTBEAT_INTERVAL_MS = 30_000;
export const DEFAULT_LEASE_TIMEOUT_MS = 120_000;

const IDENTIFIER_MAX_BYTES = 63;
/** Suffixes appended to the table names for derived objects; the longest decides the room left for the name. */
const DERIVED_SUFFIXES = ['_fencing_seq', '_seq', '_wake', '_order_idx'];
const LONGEST_SUFFIX = Math.max(...DERIVED_SUFFIXES.map((suffix) => suffix.length));

function positiveInteger(name: string, value: unknown, max = 2_147_483_647): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0 || value > max) {
    throw new LeaseConfigError(`${name} must be a positive integer (at most ${max}), got ${String(value)}`);
  }
  return value;
}

/** Checks a schema or table name: PostgreSQL identifiers are at most 63 bytes and cannot contain NUL. */
export function checkIdentifier(name: string, value: unknown, room = IDENTIFIER_MAX_BYTES): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw new LeaseConfigError(`${name} must be a non-empty string, got ${JSON.stringify(value)}`);
  }
  if (value.includes('\0')) {
    throw new LeaseConfigError(`${name} must not contain NUL characters`);
  }
  const bytes = Buffer.byteLength(value, 'utf8');
  if (bytes > room) {
    throw new LeaseConfigError(
      `${name} "${value}" is ${bytes} bytes; at most ${room} fit (PostgreSQL identifiers are at most ` +
        `${IDENTIFIER_MAX_BYTES} bytes, including suffixes for sequences and indexes): choose a shorter name`,
    );
  }
  return value;
}

/**
 * A taker blocks on the row lock of a paused holder's fenced transaction until this timeout ends it, for at most
 * `heartbeatIntervalMs + fencedIdleTimeoutMs − leaseTimeoutMs` (the lease expires a timeout after the last renewal,
 * the transaction an idle timeout after its last statement, at most one interval later). Its lease counts from when
 * its acquire was sent, so the bound keeps at least one interval of it usable.
 */
function fencedIdleTimeout(
  value: number | undefined,
  leaseTimeoutMs: number,
  safetyMarginMs: number,
  intervalMs: number,
): number {
  const timeout = positiveInteger('fencedIdleTimeoutMs', value ?? leaseTimeoutMs);
  const max = 2 * leaseTimeoutMs - safetyMarginMs - 2 * intervalMs;
  if (timeout > max) {
    throw new LeaseConfigError(
      `fencedIdleTimeoutMs (${timeout}) must be at most 2 × leaseTimeoutMs − safetyMarginMs − 2 × ` +
        `heartbeatIntervalMs (${max}): a takeover blocked behind a paused fenced transaction for longer would ` +
        'receive a lease already past its deadline',
    );
  }
  return timeout;
}

/**
 * The lease objects share one namespace per schema (tables, sequences, indexes): a table named like a derived object
 * (`waiterTableName: 'jl_fencing_seq'` with `tableName: 'jl'`) would fail later with a raw error.
 */
function checkDerivedNames(table: string, waiterTable: string): void {
  const objects: Array<[string, string]> = [
    [table, `tableName "${table}"`],
    [waiterTable, `waiterTableName "${waiterTable}"`],
    [`${table}_fencing_seq`, `the fencing sequence of tableName "${table}"`],
    [`${table}_pkey`, `the primary key index of tableName "${table}"`],
    [`${waiterTable}_seq`, `the waiter sequence of waiterTableName "${waiterTable}"`],
    [`${waiterTable}_order_idx`, `the order index of waiterTableName "${waiterTable}"`],
    [`${waiterTable}_pkey`, `the primary key index of waiterTableName "${waiterTable}"`],
  ];
  for (const [i, [name, what]] of objects.entries()) {
    const clash = objects.findIndex(([other], j) => j !== i && other === name);
    if (clash >= 0 && clash < i) {
      throw new LeaseConfigError(
        `${objects[clash][1]} collides with ${what} (both are "${name}"): ` +
          `choose table names that are not each other's derived names`,
      );
    }
  }
}

function defaultOwner(): string {
  return `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
}

/** Applies defaults and validates, throwing `LeaseConfigError` with advice. The only place that knows defaults. */
/**
 * The schema and table names with their defaults, validated (and their derived objects' names checked for clashes):
 * all the migrations and entities need — no owner identity, no timing options.
 */
export function resolveLeaseNames(names: Partial<LeaseNames> = {}): LeaseNames {
  if (typeof names !== 'object' || names === null) {
    throw new LeaseConfigError('The lease table names must be an object: { schema, tableName, waiterTableName }');
  }
  const room = IDENTIFIER_MAX_BYTES - LONGEST_SUFFIX;
  const tableName = checkIdentifier('tableName', names.tableName ?? 'job_lease', room);
  const waiterTableName = checkIdentifier('waiterTableName', names.waiterTableName ?? 'job_lease_waiter', room);
  if (tableName === waiterTableName) {
    throw new LeaseConfigError(`tableName and waiterTableName must differ (both are "${tableName}")`);
  }
  checkDerivedNames(tableName, waiterTableName);
  return { schema: checkIdentifier('schema', names.schema ?? 'public'), tableName, waiterTableName };
}

export function resolveLeaseOptions(options: LeaseModuleOptions = {}): ResolvedLeaseOptions {
  if (typeof options !== 'object' || options === null) {
    throw new LeaseConfigError('LeaseModule options must be an object');
  }
  const heartbeatIntervalMs = positiveInteger(
    'heartbeatIntervalMs',
    options.heartbeatIntervalMs ?? DEFAULT_HEARTBEAT_INTERVAL_MS,
  );
  const leaseTimeoutMs = positiveInteger('leaseTimeoutMs', options.leaseTimeoutMs ?? DEFAULT_LEASE_TIMEOUT_MS);
  if (leaseTimeoutMs < 3 * heartbeatIntervalMs) {
    throw new LeaseConfigError(
      `leaseTimeoutMs (${leaseTimeoutMs}) must be at least 3 × heartbeatIntervalMs (${heartbeatIntervalMs}) = ` +
        `${3 * heartbeatIntervalMs}: raise the timeout or shorten the interval, so that a late heartbeat is not ` +
        'taken for a dead holder',
    );
  }
  const safetyMarginMs = positiveInteger('safetyMarginMs', options.safetyMarginMs ?? heartbeatIntervalMs);
  // A lease acquired just after a tick is first renewed one interval later; a second interval leaves that renewal
  // (or its retry) time to be confirmed before the local deadline.
  if (leaseTimeoutMs - safetyMarginMs < 2 * heartbeatIntervalMs) {
    throw new LeaseConfigError(
      `safetyMarginMs (${safetyMarginMs}) leaves less than two heartbeatIntervalMs (${heartbeatIntervalMs}) ` +
        `before the local deadline (leaseTimeoutMs ${leaseTimeoutMs} − safetyMarginMs): lower the margin to at ` +
        `most ${leaseTimeoutMs - 2 * heartbeatIntervalMs}`,
    );
  }
  if (options.asyncReleaseCommits !== undefined && typeof options.asyncReleaseCommits !== 'boolean') {
    throw new LeaseConfigError('asyncReleaseCommits must be a boolean');
  }
  const waiterTimeoutMs = positiveInteger('waiterTimeoutMs', options.waiterTimeoutMs ?? 15_000);
  if (waiterTimeoutMs < 30) {
    throw new LeaseConfigError(`waiterTimeoutMs (${waiterTimeoutMs}) must be at least 30 ms`);
  }
  const { schema, tableName: table, waiterTableName: waiterTable } = resolveLeaseNames(options);
  if (options.owner !== undefined && (typeof options.owner !== 'string' || options.owner.length === 0)) {
    throw new LeaseConfigError('owner must be a non-empty string when given');
  }
  // PostgreSQL text cannot hold NUL (every acquire would fail with a raw error), and a lone surrogate cannot be
  // encoded: refuse both here, where the option is named.
  if (options.owner?.includes('\0')) {
    throw new LeaseConfigError('owner must not contain NUL characters: choose a printable process identity');
  }
  if (options.owner !== undefined && LONE_SURROGATE.test(options.owner)) {
    throw new LeaseConfigError('owner must be well-formed UTF-16 (it contains a lone surrogate)');
  }
  if (options.notify !== undefined && typeof options.notify !== 'boolean') {
    throw new LeaseConfigError('notify must be a boolean');
  }
  const { pooler, sessionUrl, notify, pollDefault } = poolerSettings(options, heartbeatIntervalMs);
  return {
    heartbeatIntervalMs,
    leaseTimeoutMs,
    safetyMarginMs,
    waiterTimeoutMs,
    waiterHeartbeatIntervalMs: Math.max(10, Math.floor(waiterTimeoutMs / 3)),
    defaultWaitTimeoutMs: positiveInteger('defaultWaitTimeoutMs', options.defaultWaitTimeoutMs ?? 60_000),
    waitPollIntervalMs: positiveInteger('waitPollIntervalMs', options.waitPollIntervalMs ?? pollDefault),
    notify,
    maxWaitersPerTarget: positiveInteger('maxWaitersPerTarget', options.maxWaitersPerTarget ?? 1_000),
    maxWaitersPerProcess: positiveInteger('maxWaitersPerProcess', options.maxWaitersPerProcess ?? 10_000),
    agingIntervalMs:
      options.agingIntervalMs === undefined ? null : positiveInteger('agingIntervalMs', options.agingIntervalMs),
    schema,
    tableName: table,
    waiterTableName: waiterTable,
    createSchema: options.createSchema ?? false,
    owner: options.owner ?? defaultOwner(),
    fencedIdleTimeoutMs: fencedIdleTimeout(
      options.fencedIdleTimeoutMs,
      leaseTimeoutMs,
      safetyMarginMs,
      heartbeatIntervalMs,
    ),
    asyncReleaseCommits: options.asyncReleaseCommits ?? false,
    maxBatchSize: positiveInteger('maxBatchSize', options.maxBatchSize ?? 64, 1_000),
    poolSize: positiveInteger('poolSize', options.poolSize ?? 10, 1_000),
    pooler,
    sessionUrl,
  };
}

/**
 * Behind a transaction pooler, LISTEN is accepted but never delivers: notifications need `sessionUrl`. Without it,
 * notify is off and waiters poll more often than the heartbeat interval.
 */
function poolerSettings(options: LeaseModuleOptions, heartbeatIntervalMs: number) {
  const pooler = options.pooler ?? 'none';
  if (pooler !== 'none' && pooler !== 'transaction') {
    throw new LeaseConfigError(`pooler must be 'none' or 'transaction', got ${JSON.stringify(pooler)}`);
  }
  const sessionUrl = options.sessionUrl ?? null;
  if (sessionUrl !== null && (typeof sessionUrl !== 'string' || sessionUrl.length === 0)) {
    throw new LeaseConfigError('sessionUrl must be a non-empty connection string when given');
  }
  const blind = pooler === 'transaction' && sessionUrl === null;
  if (blind && options.notify === true) {
    throw new LeaseConfigError(
      "notify: true cannot work behind pooler: 'transaction' without sessionUrl (LISTEN through a transaction " +
        'pooler never delivers): give sessionUrl (a direct or session-mode connection string), or leave notify unset',
    );
  }
  return {
    pooler,
    sessionUrl,
    notify: blind ? false : (options.notify ?? true),
    pollDefault: blind ? Math.min(heartbeatIntervalMs, POOLER_POLL_INTERVAL_MS) : heartbeatIntervalMs,
  } as const;
}
