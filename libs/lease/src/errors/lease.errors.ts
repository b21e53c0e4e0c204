/**
 * Lease errors are transport-neutral: they say what happened and what to do. Only lease-http.ts maps them to HTTP
 * statuses (and to WebSocket / RPC errors). Every message is written here, in `messages`, so the wording (and its
 * advice) can be read and kept consistent in one place.
 */

/** Why a lease stopped being ours before we released it. */
export type LeaseLossReason =
  /** A heartbeat found another token on the row (or no row): someone took the lease over. */
  | 'taken-over'
  /** Renewals could not be confirmed before the local safety deadline (leaseTimeoutMs − safetyMarginMs). */
  | 'renewal-deadline'
  /** The lease was released, or the service shut down, before the call completed. */
  | 'released'
  /**
   * The database failed over (or the connection reached a standby): the lease was acquired under another history
   * of the data than the server now serves, so its row may be gone or older than its holder believes.
   */
  | 'failover';

const lossCauses: Record<LeaseLossReason, string> = {
  'taken-over': 'another holder took it over',
  'renewal-deadline': 'its renewals could not be confirmed before the safety deadline',
  released: 'it was already released',
  failover: 'the database failed over since it was acquired',
};

/** The messages of the errors below (internal: the classes are the API, the wording may improve). */
export const messages = {
  busy: (targetKey: string) =>
    `Target "${targetKey}" is leased by another holder: try again later, or pass a priority or waitTimeoutMs to wait ` +
    'in line',
  queueFull: (targetKey: string, detail: string) => `Cannot wait for "${targetKey}": ${detail}`,
  /**
   * Fencing guarantees one thing: this lease's fenced writes are refused from now on. Work done outside a fenced
   * write (a call to another system, a file) was not prevented, so the message does not claim it.
   */
  lost: (targetKey: string, reason: LeaseLossReason, detail?: string) =>
    `Lease on "${targetKey}" was lost (${lossCauses[reason]}${detail ? `: ${detail}` : ''}): its fenced writes are ` +
    'refused (a refused fenced write committed nothing); work done outside fenced writes was not undone — make it ' +
    'idempotent or fence it with lease.fencingToken',
  waitTimeout: (targetKey: string, waitTimeoutMs: number) =>
    `Gave up waiting for "${targetKey}" after ${waitTimeoutMs} ms: raise waitTimeoutMs or the priority, or try later`,
  readOnly: (targetKey: string | undefined, detail: string) =>
    `No lease${targetKey === undefined ? '' : ` on "${targetKey}"`} can be granted now: the database server ` +
    `accepts no writes (${detail}) — a standby in recovery, or a failover under way. Point the application at the ` +
    "primary (a multi-host URL with target_session_attrs=read-write, or the cluster's read-write endpoint), then retry",
  databaseFailing: (targetKey: string | undefined, operation: string, detail: string) =>
    `Could not ${operation}${targetKey === undefined ? '' : ` "${targetKey}"`}: the database is unreachable or ` +
    `failing (${detail}). Transient: retry later; if it lasts, check the database and the connection settings`,
  shutdown: (what: 'leases' | 'waits' | 'cancelled') =>
    what === 'cancelled'
      ? 'LeaseService is shutting down: the wait was cancelled (its waiter row is removed)'
      : `LeaseService is shut down: no new ${what} (the application is closing; acquire before shutdown begins)`,
  waitTimeoutArgument: (got: unknown) =>
    `waitTimeoutMs must be a non-negative integer of at most 2147483647 (about 24.8 days), got ${String(got)}`,
  holdArgument: (got: unknown) =>
    'holdAtLeastMs must be a non-negative integer number of milliseconds (at most 2147483647), got ' +
    (typeof got === 'string' ? JSON.stringify(got) : String(got)),
  priorityArgument: (got: unknown) =>
    `priority must be an integer between -2147483648 and 2147483647, got ${String(got)}`,
};

/** Base class of every error this library throws on purpose. */
export class LeaseError extends Error {
  /** The target key the error is about, when there is one. */
  readonly targetKey?: string;

  constructor(message: string, targetKey?: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.targetKey = targetKey;
  }
}

/** The target is held by someone else (and the caller chose not to wait). */
export class LeaseBusyError extends LeaseError {
  /** A sensible delay before trying again (the holder's heartbeat cadence). */
  readonly retryAfterMs: number;

  constructor(targetKey: string, retryAfterMs: number, message?: string) {
    super(message ?? messages.busy(targetKey), targetKey);
    this.retryAfterMs = retryAfterMs;
  }
}

/** Too many waiters on a target or in this process: a busy refusal that could not even queue. */
export class LeaseQueueFullError extends LeaseBusyError {
  constructor(targetKey: string, retryAfterMs: number, detail: string) {
    super(targetKey, retryAfterMs, messages.queueFull(targetKey, detail));
  }
}

/**
 * The lease is no longer ours: the work must stop. What is guaranteed is that its fenced writes are refused; what
 * the work did outside them was not prevented.
 */
export class LeaseLostError extends LeaseError {
  readonly reason: LeaseLossReason;

  constructor(targetKey: string, reason: LeaseLossReason, detail?: string) {
    super(messages.lost(targetKey, reason, detail), targetKey);
    this.reason = reason;
  }
}

/** A waiting acquisition did not reach the front of the line in time. */
export class LeaseWaitTimeoutError extends LeaseError {
  readonly waitTimeoutMs: number;

  constructor(targetKey: string, waitTimeoutMs: number) {
    super(messages.waitTimeout(targetKey, waitTimeoutMs), targetKey);
    this.waitTimeoutMs = waitTimeoutMs;
  }
}

/**
 * The module's options, the decorators, or the database they point at cannot work — found at bootstrap (or when a
 * decorator is applied); the message says what to change. Never thrown for a call's own input: that is
 * `LeaseArgumentError`.
 */
export class LeaseConfigError extends LeaseError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, undefined, options);
  }
}

/** A call's own input is invalid (`waitTimeoutMs`, `holdAtLeastMs`, `priority`, or the key: `LeaseKeyError`). */
export class LeaseArgumentError extends LeaseError {
  constructor(message: string, targetKey?: string) {
    super(message, targetKey);
  }
}

/** A target key that cannot be used: not a string, empty, over 255 bytes, containing NUL, or an unresolved template. */
export class LeaseKeyError extends LeaseArgumentError {}

/**
 * The database cannot grant (or list) leases now: it accepts no writes — a standby in recovery (the application
 * reached a replica, or a failover is under way) or a server set read-only —, or it is unreachable or failing (the
 * `pg` error is the `cause`). Transient: retry later. A call already waiting in line keeps waiting.
 */
export class LeaseUnavailableError extends LeaseError {
  /** A sensible delay before trying again. */
  readonly retryAfterMs: number;

  /** `detail`: what the server said. `kind` picks the advice (default: the server accepts no writes). */
  constructor(
    targetKey: string | undefined,
    detail: string,
    options: { cause?: unknown; kind?: 'read-only' | 'failing'; operation?: string } = {},
  ) {
    const message =
      options.kind === 'failing'
        ? messages.databaseFailing(targetKey, options.operation ?? 'acquire a lease on', detail)
        : messages.readOnly(targetKey, detail);
    super(message, targetKey, { cause: options.cause });
    this.retryAfterMs = 1_000;
  }
}

/** The service is shutting down (or shut down): no new leases or waits. */
export class LeaseShutdownError extends LeaseError {
  constructor(targetKey: string | undefined, what: 'leases' | 'waits' | 'cancelled' = 'leases') {
    super(messages.shutdown(what), targetKey);
  }
}

/** An error (or any thrown value) as one line of a log message. */
export function errorText(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return typeof error === 'string' ? error : (JSON.stringify(error) ?? typeof error);
}

/**
 * A failure of the database or of the connection to it, as opposed to a bug: a server error (a SQLSTATE), a socket
 * error (an errno code such as ECONNREFUSED), or one of `pg`'s connection failures (terminated, timed out).
 */
export function isDatabaseFailure(error: unknown): boolean {
  if (error instanceof LeaseError || !(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && code.length > 0) return true;
  return /connection|terminated|timeout|timed out|ECONN|EPIPE|socket/i.test(error.message);
}

/** `error` as a `LeaseUnavailableError` when it is a database failure; anything else unchanged. */
export function unavailableOr(error: unknown, targetKey: string | undefined, operation: string): unknown {
  if (!isDatabaseFailure(error)) return error;
  const detail = error instanceof Error ? error.message : String(error);
  return new LeaseUnavailableError(targetKey, detail, { cause: error, kind: 'failing', operation });
}
