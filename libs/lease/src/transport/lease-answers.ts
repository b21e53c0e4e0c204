/** How each lease error is answered, class by class: the one table the HTTP and the WebSocket / RPC mappings share. */
import {
  LeaseArgumentError,
  LeaseBusyError,
  LeaseDrainedError,
  type LeaseError,
  LeaseJoinedRunError,
  LeaseLostError,
  LeaseShutdownError,
  LeaseUnavailableError,
  LeaseWaitTimeoutError,
} from '../errors/lease.errors.js';

/** How one lease error is answered: the HTTP status, and what the body adds to code, message and targetKey. */
export interface Answer {
  readonly status: number;
  readonly title: string;
  /** Sent as `Retry-After` (seconds, at least 1) on HTTP and as `retryAfterMs` on WebSocket / RPC. */
  readonly retryAfterMs?: number;
  readonly extra?: Record<string, unknown>;
}

/**
 * The one mapping of lease errors, class by class (subclasses first); the table of docs/errors-and-http.md says the same.
 * Configuration errors are the application's fault (500); everything else tells the client what to do.
 */
export function answerOf(error: LeaseError): Answer {
  if (error instanceof LeaseDrainedError) {
    return {
      status: 503,
      title: 'Service Unavailable',
      retryAfterMs: error.retryAfterMs,
      extra: { drained: error.drainKind, reason: error.drainReason },
    };
  }
  if (error instanceof LeaseBusyError) return { status: 409, title: 'Conflict', retryAfterMs: error.retryAfterMs };
  if (error instanceof LeaseArgumentError) return { status: 400, title: 'Bad Request' };
  if (error instanceof LeaseLostError) {
    return { status: 409, title: 'Lease Lost', extra: { reason: error.reason, discarded: true } };
  }
  if (error instanceof LeaseWaitTimeoutError) {
    return {
      status: 503,
      title: 'Service Unavailable',
      retryAfterMs: error.waitTimeoutMs,
      extra: { waitTimeoutMs: error.waitTimeoutMs },
    };
  }
  if (error instanceof LeaseUnavailableError) {
    return { status: 503, title: 'Service Unavailable', retryAfterMs: error.retryAfterMs };
  }
  // The original's status when it had one (an HttpException), else a server error like the original's.
  if (error instanceof LeaseJoinedRunError) {
    return {
      status: error.status ?? 500,
      title: 'Joined Run Failed',
      extra: { fencingToken: String(error.fencingToken) },
    };
  }
  // Another instance (or this one, restarted) can serve the retry.
  if (error instanceof LeaseShutdownError) return { status: 503, title: 'Service Unavailable', retryAfterMs: 1_000 };
  return { status: 500, title: 'Internal Server Error' };
}
