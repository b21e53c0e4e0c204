/** How each lease error is answered, class by class: the one table the HTTP and the WebSocket / RPC mappings share. */
import {
  LeaseArgumentError,
  LeaseBusyError,
  LeaseDrainedError,
  type LeaseError,
  LeaseJoinedRunError,
  LeaseLostError,
  LeaseQueueFullError,
  LeaseShutdownError,
  LeaseUnavailableError,
  LeaseWaitTimeoutError,
} from '../errors/lease.errors.js';
import { slotLimitOf } from '../errors/busy-details.js';
import { messages } from '../errors/lease.messages.js';

/** How one lease error is answered: the HTTP status, and what the body adds to code, message and targetKey. */
export interface Answer {
  readonly status: number;
  readonly title: string;
  /**
   * What the client is told: what happened and when to try again, never which option the developer could change
   * (that advice is the error's own message: see answer-advice.ts). A 400's is the error's (the input is the client's).
   */
  readonly message: string;
  /** Sent as `Retry-After` (seconds, at least 1) on HTTP and as `retryAfterMs` on WebSocket / RPC. */
  readonly retryAfterMs?: number;
  readonly extra?: Record<string, unknown>;
}

/** `Retry-After` of `retryAfterMs`: whole seconds, rounded up, at least 1. */
export function retryAfterSeconds(retryAfterMs: number): number {
  return Math.max(1, Math.ceil(retryAfterMs / 1000));
}

/**
 * The one mapping of lease errors, class by class (subclasses first); docs/errors-and-http.md says the same.
 * Configuration errors are the application's fault (500, no detail for the client); everything else tells the client
 * what happened and when to retry.
 */
export function answerOf(error: LeaseError): Answer {
  const key = error.targetKey ?? '';
  if (error instanceof LeaseDrainedError) {
    return {
      status: 503,
      title: 'Service Unavailable',
      message: messages.answerDrained(key, retryAfterSeconds(error.retryAfterMs)),
      retryAfterMs: error.retryAfterMs,
      extra: { drained: error.drainKind, reason: error.drainReason },
    };
  }
  if (error instanceof LeaseBusyError) {
    const seconds = retryAfterSeconds(error.retryAfterMs);
    const slots = slotLimitOf.get(error);
    const message =
      error instanceof LeaseQueueFullError
        ? messages.answerLineFull(key, seconds)
        : slots === undefined
          ? messages.answerBusy(key, seconds)
          : messages.answerSlotsBusy(key, slots, seconds);
    return { status: 409, title: 'Conflict', message, retryAfterMs: error.retryAfterMs };
  }
  if (error instanceof LeaseArgumentError) return { status: 400, title: 'Bad Request', message: error.message };
  if (error instanceof LeaseLostError) {
    return {
      status: 409,
      title: 'Lease Lost',
      message: messages.answerLost(key, error.reason),
      extra: { reason: error.reason, discarded: true },
    };
  }
  if (error instanceof LeaseWaitTimeoutError) {
    return {
      status: 503,
      title: 'Service Unavailable',
      message: messages.answerWaitTimeout(key, error.waitTimeoutMs, retryAfterSeconds(error.waitTimeoutMs)),
      retryAfterMs: error.waitTimeoutMs,
      extra: { waitTimeoutMs: error.waitTimeoutMs },
    };
  }
  if (error instanceof LeaseUnavailableError) {
    return {
      status: 503,
      title: 'Service Unavailable',
      message: messages.answerUnavailable(error.targetKey, retryAfterSeconds(error.retryAfterMs)),
      retryAfterMs: error.retryAfterMs,
    };
  }
  // The original's status when it had one (an HttpException), else a server error like the original's.
  if (error instanceof LeaseJoinedRunError) {
    return {
      status: error.status ?? 500,
      title: 'Joined Run Failed',
      message: error.status === undefined ? messages.answerInternal() : error.message,
      extra: { fencingToken: String(error.fencingToken) },
    };
  }
  // Another instance (or this one, restarted) can serve the retry.
  if (error instanceof LeaseShutdownError) {
    return { status: 503, title: 'Service Unavailable', message: messages.answerShutdown(1), retryAfterMs: 1_000 };
  }
  return { status: 500, title: 'Internal Server Error', message: messages.answerInternal() };
}
