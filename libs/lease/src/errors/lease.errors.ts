/**
 * Lease errors are transport-neutral: they say what happened and what to do. Only transport/ maps them to HTTP
 * statuses (and to WebSocket / RPC errors). Their messages are written in lease.messages.ts, with every other
 * message of the library, so the wording (and its advice) can be read and kept consistent in one place.
 */
import type { LeaseLossReason } from '../interfaces/lease-loss-reason.interface.js';
import { messages } from './lease.messages.js';

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
 * The target (its key, or its key template) is drained by an operator (`LeaseOperator.drain`): no new acquisition is
 * granted until it is undrained. A busy refusal on purpose, so `onBusy: 'skip'` skips it quietly.
 */
export class LeaseDrainedError extends LeaseBusyError {
  /** What the drain names: the key itself, or the key's template. */
  readonly drainKind: 'key' | 'template';
  readonly drainSubject: string;
  readonly drainReason: string;

  constructor(
    targetKey: string,
    retryAfterMs: number,
    drain: { kind: 'key' | 'template'; subject: string; reason: string },
  ) {
    super(targetKey, retryAfterMs, messages.drained(targetKey, drain.kind, drain.subject, drain.reason));
    this.drainKind = drain.kind;
    this.drainSubject = drain.subject;
    this.drainReason = drain.reason;
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

/**
 * A call's own input is invalid (an unknown option, its `onBusy` policy, `holdAtLeastMs`, `priority`; the key:
 * `LeaseKeyError`).
 */
export class LeaseArgumentError extends LeaseError {
  constructor(message: string, targetKey?: string) {
    super(message, targetKey);
  }
}

/** A target key that cannot be used: not a string, empty, over 255 bytes, containing NUL, or an unresolved template. */
export class LeaseKeyError extends LeaseArgumentError {}

/**
 * Callers of one key asked different limits (`limit`; a call without one asks 1): the key is held under `heldLimit`
 * and this call asked `limit`. A programming error, like a configuration error: every caller of a key must agree on
 * how many may hold it.
 */
export class LeaseLimitConflictError extends LeaseError {
  readonly limit: number;
  readonly heldLimit: number;

  constructor(targetKey: string, limit: number, heldLimit: number) {
    super(messages.limitConflict(targetKey, limit, heldLimit), targetKey);
    this.limit = limit;
    this.heldLimit = heldLimit;
  }
}

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
  constructor(targetKey: string | undefined, what: 'leases' | 'waits' | 'cancelled' | 'released' = 'leases') {
    super(messages.shutdown(what), targetKey);
  }
}

/**
 * The run a call joined (`onBusy: 'join'`) failed: the message is the original's, `cause` the original error (in this
 * process; from another process, `{ name, message }`). `status` / `response`: the original's HTTP status and body when
 * it had them (an `HttpException`), so an HTTP duplicate answers what the original answered.
 */
export class LeaseJoinedRunError extends LeaseError {
  /** The fencing token of the run that failed. */
  readonly fencingToken: bigint;
  /** The original error's HTTP status (`getStatus()`), when it had one. */
  readonly status?: number;
  /** The original error's HTTP body (`getResponse()`), when it had one. */
  readonly response?: unknown;

  constructor(
    targetKey: string,
    fencingToken: bigint,
    message: string,
    options: { cause?: unknown; status?: number; response?: unknown } = {},
  ) {
    super(message, targetKey, { cause: options.cause });
    this.fencingToken = fencingToken;
    this.status = options.status;
    this.response = options.response;
  }
}
