/**
 * The module's options with their defaults applied and checked: the only place that knows defaults. Every rule
 * throws `LeaseConfigError` with advice, naming the option by its path (`timing.heartbeatIntervalMs`).
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { LeaseConfigError } from '../errors/lease.errors.js';
import type { LeaseModuleOptions } from '../interfaces/lease-module-options.interface.js';
import type { EngineSettings } from './engine-settings.js';
import { type FlatLeaseOptions, flattenLeaseOptions, optionPath } from './option-groups.js';
import { LONE_SURROGATE } from './call-input.js';
import { resolveLeaseNames } from './lease-names.js';
import { INT32_MAX, MAX_TIMER_MS, ONE_SECOND_MS } from './limits.js';
import { messages } from '../errors/lease.messages.js';

/** Fallback poll of waiters behind a transaction pooler without `sessionUrl`, where no NOTIFY can wake them. */
export const POOLER_POLL_INTERVAL_MS = ONE_SECOND_MS;

export const DEFAULT_HEARTBEAT_INTERVAL_MS = 30_000;
export const DEFAULT_LEASE_TIMEOUT_MS = 120_000;
/** Kubernetes' default `terminationGracePeriodSeconds` (30 s), less 5 s for the releases and the rest of shutdown. */
export const DEFAULT_SHUTDOWN_GRACE_MS = 25_000;

/**
 * An integer option from `min` to `max`. A decimal string (ConfigService and environment variables hand over strings)
 * is taken as its number; any other string is named as a string in the message.
 */
function integerOption(
  name: string,
  raw: unknown,
  min: 0 | 1,
  max: number,
  message: (name: string, max: number, got: string) => string,
): number {
  const value = typeof raw === 'string' && /^\s*\d+\s*$/.test(raw) ? Number(raw) : raw;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    const got = typeof value === 'string' ? `the string ${JSON.stringify(value)}` : String(value);
    throw new LeaseConfigError(message(optionPath(name), max, got));
  }
  return value;
}

/** A positive integer option (see `integerOption`). */
function positiveInteger(name: string, raw: unknown, max = INT32_MAX): number {
  return integerOption(name, raw, 1, max, messages.positiveInteger);
}

/**
 * A taker blocks on the row lock of a paused holder's fenced transaction until this timeout ends it, for at most
 * `heartbeatIntervalMs + fencedIdleTimeoutMs − leaseTimeoutMs` (the lease expires a timeout after the last renewal,
 * the transaction an idle timeout after its last statement, at most one interval later). Its lease counts from when
 * its acquire was sent, so the bound keeps at least one interval of it usable.
 */
function fencedIdleTimeout(value: unknown, leaseTimeoutMs: number, safetyMarginMs: number, intervalMs: number): number {
  const timeout = positiveInteger('fencedIdleTimeoutMs', value ?? leaseTimeoutMs);
  const max = 2 * leaseTimeoutMs - safetyMarginMs - 2 * intervalMs;
  if (timeout > max) {
    throw new LeaseConfigError(messages.fencedIdleTimeoutTooLong(timeout, max));
  }
  return timeout;
}

function defaultOwner(): string {
  return `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
}

/** The grouped options resolved into the engine's flat settings (see `EngineSettings`). */
export function resolveLeaseOptions(grouped: LeaseModuleOptions = {}): EngineSettings {
  const options = flattenLeaseOptions(grouped);
  const heartbeatIntervalMs = positiveInteger(
    'heartbeatIntervalMs',
    options.heartbeatIntervalMs ?? DEFAULT_HEARTBEAT_INTERVAL_MS,
  );
  const leaseTimeoutMs = positiveInteger('leaseTimeoutMs', options.leaseTimeoutMs ?? DEFAULT_LEASE_TIMEOUT_MS);
  if (leaseTimeoutMs < 3 * heartbeatIntervalMs) {
    throw new LeaseConfigError(
      messages.leaseTimeoutTooShort(leaseTimeoutMs, heartbeatIntervalMs, 3 * heartbeatIntervalMs),
    );
  }
  const safetyMarginMs = positiveInteger('safetyMarginMs', options.safetyMarginMs ?? heartbeatIntervalMs);
  // A lease acquired just after a tick is first renewed one interval later; a second interval leaves that renewal
  // (or its retry) time to be confirmed before the local deadline.
  if (leaseTimeoutMs - safetyMarginMs < 2 * heartbeatIntervalMs) {
    throw new LeaseConfigError(
      messages.safetyMarginTooLarge(
        safetyMarginMs,
        heartbeatIntervalMs,
        leaseTimeoutMs,
        leaseTimeoutMs - 2 * heartbeatIntervalMs,
      ),
    );
  }
  if (options.asyncReleaseCommits !== undefined && typeof options.asyncReleaseCommits !== 'boolean') {
    throw new LeaseConfigError(messages.asyncReleaseCommitsNotBoolean());
  }
  const waiterTimeoutMs = positiveInteger('waiterTimeoutMs', options.waiterTimeoutMs ?? 15_000);
  if (waiterTimeoutMs < 30) {
    throw new LeaseConfigError(messages.waiterTimeoutTooShort(waiterTimeoutMs));
  }
  const { schema, tableName: table, waiterTableName: waiterTable } = resolveLeaseNames(options);
  if (options.owner !== undefined && (typeof options.owner !== 'string' || options.owner.length === 0)) {
    throw new LeaseConfigError(messages.ownerEmpty());
  }
  // PostgreSQL text cannot hold NUL (every acquire would fail with a raw error), and a lone surrogate cannot be
  // encoded: refuse both here, where the option is named.
  if (options.owner?.includes('\0')) {
    throw new LeaseConfigError(messages.ownerNul());
  }
  if (options.owner !== undefined && LONE_SURROGATE.test(options.owner)) {
    throw new LeaseConfigError(messages.ownerLoneSurrogate());
  }
  if (options.notify !== undefined && typeof options.notify !== 'boolean') {
    throw new LeaseConfigError(messages.notifyNotBoolean());
  }
  if (options.traceTargetKeys !== undefined && typeof options.traceTargetKeys !== 'boolean') {
    throw new LeaseConfigError(messages.traceTargetKeysNotBoolean());
  }
  if (options.journal !== undefined && typeof options.journal !== 'boolean') {
    throw new LeaseConfigError(messages.journalNotBoolean());
  }
  const { pooler, sessionUrl, notify, pollDefault } = poolerSettings(options, heartbeatIntervalMs);
  return {
    heartbeatIntervalMs,
    leaseTimeoutMs,
    safetyMarginMs,
    waiterTimeoutMs,
    waiterHeartbeatIntervalMs: Math.max(10, Math.floor(waiterTimeoutMs / 3)),
    defaultWaitTimeoutMs: positiveInteger('defaultWaitTimeoutMs', options.defaultWaitTimeoutMs ?? 60_000),
    joinResultTtlMs: positiveInteger('joinResultTtlMs', options.joinResultTtlMs ?? 60_000),
    // Two intervals: a holder in another process hears of the preemption at its next renewal (at most one interval
    // away), and has the rest to stop and release before the takeover.
    preemptGraceMs: integerOption(
      'preemptGraceMs',
      options.preemptGraceMs ?? 2 * heartbeatIntervalMs,
      0,
      MAX_TIMER_MS,
      messages.nonNegativeInteger,
    ),
    waitPollIntervalMs: positiveInteger('waitPollIntervalMs', options.waitPollIntervalMs ?? pollDefault),
    notify,
    traceTargetKeys: options.traceTargetKeys ?? false,
    journal: options.journal ?? false,
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
    shutdownGraceMs: integerOption(
      'shutdownGraceMs',
      options.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS,
      0,
      MAX_TIMER_MS,
      messages.nonNegativeInteger,
    ),
    ...dataSourceSettings(options),
  };
}

/**
 * Behind a transaction pooler, LISTEN is accepted but never delivers: notifications need `sessionUrl`. Without it,
 * notify is off and waiters poll more often than the heartbeat interval.
 */
function poolerSettings(options: FlatLeaseOptions, heartbeatIntervalMs: number) {
  const pooler = options.pooler ?? 'none';
  if (pooler !== 'none' && pooler !== 'transaction') {
    throw new LeaseConfigError(messages.poolerUnknown(JSON.stringify(pooler)));
  }
  const sessionUrl = options.sessionUrl ?? null;
  if (sessionUrl !== null && (typeof sessionUrl !== 'string' || sessionUrl.length === 0)) {
    throw new LeaseConfigError(messages.sessionUrlEmpty());
  }
  const blind = pooler === 'transaction' && sessionUrl === null;
  if (blind && options.notify === true) {
    throw new LeaseConfigError(messages.notifyBehindBlindPooler());
  }
  return {
    pooler,
    sessionUrl,
    notify: blind ? false : (options.notify ?? true),
    pollDefault: blind ? Math.min(heartbeatIntervalMs, POOLER_POLL_INTERVAL_MS) : heartbeatIntervalMs,
  } as const;
}

/** Which DataSource: a named one of the application's, or options for one the module owns (not both). */
function dataSourceSettings(options: FlatLeaseOptions) {
  const { dataSourceName, dataSource } = options;
  if (dataSourceName !== undefined && (typeof dataSourceName !== 'string' || dataSourceName.length === 0)) {
    throw new LeaseConfigError(messages.dataSourceNameEmpty());
  }
  if (dataSource !== undefined && (typeof dataSource !== 'object' || dataSource === null)) {
    throw new LeaseConfigError(messages.dataSourceNotObject());
  }
  return { dataSourceName: dataSourceName ?? null, dataSource: dataSource ?? null } as const;
}
