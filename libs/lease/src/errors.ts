/**
 * Lease errors are transport-neutral: they say what happened and what to do. Only the HTTP interceptor maps them
 * to status codes.
 */

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
    super(
      message ??
        `Target "${targetKey}" is leased by another holder: try again later, or pass a priority or waitTimeoutMs to wait in line`,
      targetKey,
    );
    this.retryAfterMs = retryAfterMs;
  }
}

/** Why a lease stopped being ours before we released it. */
export type LeaseLossReason =
  /** A heartbeat found another token on the row (or no row): someone took the lease over. */
  | 'taken-over'
  /** Renewals could not be confirmed before the local safety deadline (SPEC §3.4). */
  | 'renewal-deadline'
  /** The lease was released, or the service shut down, before the call completed. */
  | 'released'
  /**
   * The database failed over (or the connection reached a standby): the lease was acquired under another history
   * of the data than the server now serves, so its row may be gone or older than its holder believes.
   */
  | 'failover';

/** The lease is no longer ours: the work must stop and its result must not be saved. */
export class LeaseLostError extends LeaseError {
  readonly reason: LeaseLossReason;

  constructor(targetKey: string, reason: LeaseLossReason, detail?: string) {
    const why: Record<LeaseLossReason, string> = {
      'taken-over': 'another holder took it over',
      'renewal-deadline': 'its renewals could not be confirmed before the safety deadline',
      released: 'it was already released',
      failover: 'the database failed over since it was acquired',
    };
    super(
      `Lease on "${targetKey}" was lost (${why[reason]}${detail ? `: ${detail}` : ''}); the result was discarded and nothing was written`,
      targetKey,
    );
    this.reason = reason;
  }
}

/** A waiting acquisition did not reach the front of the line in time. */
export class LeaseWaitTimeoutError extends LeaseError {
  readonly waitTimeoutMs: number;

  constructor(targetKey: string, waitTimeoutMs: number) {
    super(
      `Gave up waiting for "${targetKey}" after ${waitTimeoutMs} ms: raise waitTimeoutMs or the priority, or try later`,
      targetKey,
    );
    this.waitTimeoutMs = waitTimeoutMs;
  }
}

/** The module's options (or the database it points at) cannot work; the message says what to change. */
export class LeaseConfigError extends LeaseError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, undefined, options);
  }
}

/** A target key that cannot be used: not a string, empty, over 255 bytes, containing NUL, or an unresolved template. */
export class LeaseKeyError extends LeaseError {
  constructor(message: string, targetKey?: string) {
    super(message, targetKey);
  }
}

/** Too many waiters on a target or in this process: a busy refusal that could not even queue. */
export class LeaseQueueFullError extends LeaseBusyError {
  constructor(targetKey: string, retryAfterMs: number, detail: string) {
    super(targetKey, retryAfterMs, `Cannot wait for "${targetKey}": ${detail}`);
  }
}

/**
 * The database server accepts no writes — a standby in recovery (the application reached a replica, or a failover is
 * under way) or a server set read-only — so no lease can be granted or written there. Transient: retry once the
 * application reaches the primary. A waiting call keeps waiting.
 */
export class LeaseUnavailableError extends LeaseError {
  /** A sensible delay before trying again. */
  readonly retryAfterMs: number;

  constructor(targetKey: string, detail: string, options?: { cause?: unknown }) {
    super(
      `No lease on "${targetKey}" can be granted now: the database server accepts no writes (${detail}) — a standby ` +
        'in recovery, or a failover under way. Point the application at the primary (a multi-host URL with ' +
        'target_session_attrs=read-write, or the cluster\'s read-write endpoint), then retry',
      targetKey,
      options,
    );
    this.retryAfterMs = 1_000;
  }
}
