/**
 * The module's options with their defaults applied and checked: the only place that knows defaults. Every rule
 * throws `LeaseConfigError` with advice.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { LeaseConfigError } from '../errors/lease.errors.js';
import type { LeaseModuleOptions, ResolvedLeaseOptions } from '../interfaces/lease-module-options.interface.js';
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

/** Every key of `LeaseModuleOptions` (the compiler checks the list is complete): any other key is a typo. */
const OPTION_KEYS = [
  'heartbeatIntervalMs',
  'leaseTimeoutMs',
  'safetyMarginMs',
  'waiterTimeoutMs',
  'defaultWaitTimeoutMs',
  'joinResultTtlMs',
  'preemptGraceMs',
  'waitPollIntervalMs',
  'notify',
  'maxWaitersPerTarget',
  'maxWaitersPerProcess',
  'asyncReleaseCommits',
  'maxBatchSize',
  'poolSize',
  'agingIntervalMs',
  'schema',
  'tableName',
  'waiterTableName',
  'createSchema',
  'owner',
  'dataSourceName',
  'dataSource',
  'fencedIdleTimeoutMs',
  'pooler',
  'sessionUrl',
  'traceTargetKeys',
  'shutdownGraceMs',
  'journal',
] as const satisfies ReadonlyArray<keyof LeaseModuleOptions>;
const allKeysListed: Exclude<keyof LeaseModuleOptions, (typeof OPTION_KEYS)[number]> extends never ? true : never =
  true;
void allKeysListed;

/** Edit distance (insertions, deletions, substitutions), for the nearest valid key of a typo. */
function distance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const same = a[i - 1].toLowerCase() === b[j - 1].toLowerCase();
      row[j] = Math.min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (same ? 0 : 1));
    }
    previous = row;
  }
  return previous[b.length];
}

/** Unknown keys are refused, naming the nearest valid key (or, far from all of them, the list). */
function checkKeys(options: object): void {
  for (const key of Object.keys(options)) {
    if ((OPTION_KEYS as readonly string[]).includes(key)) continue;
    const [nearest] = [...OPTION_KEYS].sort((a, b) => distance(key, a) - distance(key, b));
    const close = distance(key, nearest) <= Math.max(2, Math.floor(nearest.length / 4));
    throw new LeaseConfigError(messages.unknownOption(key, close ? nearest : undefined, OPTION_KEYS.join(', ')));
  }
}

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
    throw new LeaseConfigError(message(name, max, got));
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

export function resolveLeaseOptions(options: LeaseModuleOptions = {}): ResolvedLeaseOptions {
  if (typeof options !== 'object' || options === null) {
    throw new LeaseConfigError(messages.optionsNotObject());
  }
  checkKeys(options);
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
  };
}

/**
 * Behind a transaction pooler, LISTEN is accepted but never delivers: notifications need `sessionUrl`. Without it,
 * notify is off and waiters poll more often than the heartbeat interval.
 */
function poolerSettings(options: LeaseModuleOptions, heartbeatIntervalMs: number) {
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
