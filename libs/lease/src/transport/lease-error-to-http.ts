import { type ArgumentsHost, Catch, HttpException } from '@nestjs/common';
import { BaseExceptionFilter } from '@nestjs/core';
import {
  LeaseArgumentError,
  LeaseBusyError,
  LeaseConfigError,
  LeaseError,
  LeaseLostError,
  LeaseShutdownError,
  LeaseUnavailableError,
  LeaseWaitTimeoutError,
} from '../errors/lease.errors.js';

function setHeader(response: unknown, name: string, value: string): void {
  const target = response as { setHeader?: (n: string, v: string) => void; header?: (n: string, v: string) => void };
  if (typeof target?.setHeader === 'function') target.setHeader(name, value);
  else if (typeof target?.header === 'function') target.header(name, value);
}

/** How one lease error is answered: the HTTP status, and what the body adds to code, message and targetKey. */
interface Answer {
  readonly status: number;
  readonly title: string;
  /** Sent as `Retry-After` (seconds, at least 1) on HTTP and as `retryAfterMs` on WebSocket / RPC. */
  readonly retryAfterMs?: number;
  readonly extra?: Record<string, unknown>;
}

/**
 * The one mapping of lease errors, class by class (subclasses first); the README's error table says the same.
 * Configuration errors are the application's fault (500); everything else tells the client what to do.
 */
export function answerOf(error: LeaseError): Answer {
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
  // Another instance (or this one, restarted) can serve the retry.
  if (error instanceof LeaseShutdownError) return { status: 503, title: 'Service Unavailable', retryAfterMs: 1_000 };
  if (error instanceof LeaseConfigError) return { status: 500, title: 'Internal Server Error' };
  return { status: 500, title: 'Internal Server Error' };
}

/**
 * Maps a lease error to an HTTP exception (other errors pass through unchanged), with `Retry-After` on `response`
 * where the answer has one. The only place that knows about HTTP.
 */
export function leaseErrorToHttp(error: unknown, response?: unknown): unknown {
  if (!(error instanceof LeaseError) || error instanceof HttpException) return error;
  const answer = answerOf(error);
  const body: Record<string, unknown> = {
    statusCode: answer.status,
    error: answer.title,
    message: error.message,
    code: error.name,
    targetKey: error.targetKey,
    ...answer.extra,
  };
  if (answer.retryAfterMs !== undefined) {
    const retryAfterSeconds = Math.max(1, Math.ceil(answer.retryAfterMs / 1000));
    setHeader(response, 'Retry-After', String(retryAfterSeconds));
    body.retryAfterSeconds = retryAfterSeconds;
  }
  return new HttpException(body, answer.status, { cause: error });
}

/** What a WebSocket client or microservice caller receives for a lease error: the same facts, no HTTP status. */
export function leaseErrorBody(error: LeaseError): Record<string, unknown> {
  const answer = answerOf(error);
  const body: Record<string, unknown> = {
    status: 'error',
    code: error.name,
    message: error.message,
    targetKey: error.targetKey,
  };
  if (answer.retryAfterMs !== undefined && !(error instanceof LeaseWaitTimeoutError)) {
    body.retryAfterMs = answer.retryAfterMs;
  }
  return Object.assign(body, answer.extra);
}

type TransportErrors = { WsException?: new (error: object) => Error; RpcException?: new (error: object) => Error };
const transportErrors: Partial<Record<'ws' | 'rpc', Promise<TransportErrors>>> = {};

/**
 * Maps a lease error for the transport of the call: HTTP exceptions on HTTP; a `WsException` (an "exception" message
 * to the client) on WebSocket gateways; an `RpcException` (the error the caller receives) on microservices. The
 * transport packages are imported only when such a call fails: an application with a gateway has them installed.
 * Other errors, and lease errors on other transports, pass through unchanged.
 */
export async function leaseErrorToTransport(error: unknown, type: string, response?: unknown): Promise<unknown> {
  if (type === 'http') return leaseErrorToHttp(error, response);
  if (!(error instanceof LeaseError) || (type !== 'ws' && type !== 'rpc')) return error;
  const load = () => (type === 'ws' ? import('@nestjs/websockets') : import('@nestjs/microservices'));
  const errors = await (transportErrors[type] ??= load().then(
    (module): TransportErrors => module as TransportErrors,
    (): TransportErrors => ({}),
  ));
  const Exception = type === 'ws' ? errors.WsException : errors.RpcException;
  return Exception ? new Exception(leaseErrorBody(error)) : error;
}

/**
 * Optional: maps `LeaseError`s thrown by `@Exclusive` provider methods (or `LeaseService.run`) called from
 * undecorated controllers, the same way `@Exclusive` handlers do.
 * `app.useGlobalFilters(new LeaseExceptionFilter(httpAdapter))`, or
 * `{ provide: APP_FILTER, useClass: LeaseExceptionFilter }`.
 */
@Catch(LeaseError)
export class LeaseExceptionFilter extends BaseExceptionFilter {
  override catch(exception: LeaseError, host: ArgumentsHost): void {
    const response = host.getType() === 'http' ? host.switchToHttp().getResponse() : undefined;
    super.catch(leaseErrorToHttp(exception, response), host);
  }
}
