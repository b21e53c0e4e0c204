import {
  type ArgumentsHost,
  BadRequestException,
  Catch,
  ConflictException,
  HttpException,
  InternalServerErrorException,
  ServiceUnavailableException,
} from '@nestjs/common';
import { BaseExceptionFilter } from '@nestjs/core';
import {
  LeaseBusyError,
  LeaseConfigError,
  LeaseError,
  LeaseKeyError,
  LeaseLostError,
  LeaseUnavailableError,
  LeaseWaitTimeoutError,
} from './errors.js';

function setHeader(response: unknown, name: string, value: string): void {
  const target = response as { setHeader?: (n: string, v: string) => void; header?: (n: string, v: string) => void };
  if (typeof target?.setHeader === 'function') target.setHeader(name, value);
  else if (typeof target?.header === 'function') target.header(name, value);
}

/**
 * Maps a lease error to an HTTP exception (other errors pass through unchanged). The only place that knows about
 * HTTP: busy → 409 + Retry-After; bad key → 400; lost → 409 saying the result was discarded; wait timeout → 503 +
 * Retry-After; configuration → 500.
 */
export function leaseErrorToHttp(error: unknown, response?: unknown): unknown {
  if (!(error instanceof LeaseError) || error instanceof HttpException) return error;
  const body = (status: number, title: string, extra: Record<string, unknown> = {}) => ({
    statusCode: status,
    error: title,
    message: error.message,
    code: error.name,
    targetKey: error.targetKey,
    ...extra,
  });
  if (error instanceof LeaseBusyError) {
    const retryAfterSeconds = Math.max(1, Math.ceil(error.retryAfterMs / 1000));
    setHeader(response, 'Retry-After', String(retryAfterSeconds));
    return new ConflictException(body(409, 'Conflict', { retryAfterSeconds }), { cause: error });
  }
  if (error instanceof LeaseKeyError) return new BadRequestException(body(400, 'Bad Request'), { cause: error });
  if (error instanceof LeaseLostError) {
    return new ConflictException(body(409, 'Lease Lost', { reason: error.reason, discarded: true }), { cause: error });
  }
  if (error instanceof LeaseWaitTimeoutError) {
    const retryAfterSeconds = Math.max(1, Math.ceil(error.waitTimeoutMs / 1000));
    setHeader(response, 'Retry-After', String(retryAfterSeconds));
    return new ServiceUnavailableException(body(503, 'Service Unavailable', { retryAfterSeconds }), { cause: error });
  }
  if (error instanceof LeaseConfigError) {
    return new InternalServerErrorException(body(500, 'Internal Server Error'), { cause: error });
  }
  if (error instanceof LeaseUnavailableError) {
    const retryAfterSeconds = Math.max(1, Math.ceil(error.retryAfterMs / 1000));
    setHeader(response, 'Retry-After', String(retryAfterSeconds));
    return new ServiceUnavailableException(body(503, 'Service Unavailable', { retryAfterSeconds }), { cause: error });
  }
  return new ServiceUnavailableException(body(503, 'Service Unavailable'), { cause: error });
}

/** What a WebSocket client or microservice caller receives for a lease error: the same facts, no HTTP status. */
export function leaseErrorBody(error: LeaseError): Record<string, unknown> {
  const body: Record<string, unknown> = {
    status: 'error',
    code: error.name,
    message: error.message,
    targetKey: error.targetKey,
  };
  if (error instanceof LeaseBusyError) body.retryAfterMs = error.retryAfterMs;
  if (error instanceof LeaseLostError) Object.assign(body, { reason: error.reason, discarded: true });
  if (error instanceof LeaseWaitTimeoutError) body.waitTimeoutMs = error.waitTimeoutMs;
  if (error instanceof LeaseUnavailableError) body.retryAfterMs = error.retryAfterMs;
  return body;
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
 * undecorated controllers, the same way `@Exclusive` handlers do. `app.useGlobalFilters(new LeaseExceptionFilter(httpAdapter))`
 * or `{ provide: APP_FILTER, useClass: LeaseExceptionFilter }`.
 */
@Catch(LeaseError)
export class LeaseExceptionFilter extends BaseExceptionFilter {
  override catch(exception: LeaseError, host: ArgumentsHost): void {
    const response = host.getType() === 'http' ? host.switchToHttp().getResponse() : undefined;
    super.catch(leaseErrorToHttp(exception, response), host);
  }
}
