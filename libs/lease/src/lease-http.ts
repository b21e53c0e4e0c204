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
  return new ServiceUnavailableException(body(503, 'Service Unavailable'), { cause: error });
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
