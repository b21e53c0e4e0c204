import { type ArgumentsHost, Catch } from '@nestjs/common';
import { BaseExceptionFilter } from '@nestjs/core';
import { LeaseError } from '../errors/lease.errors.js';
import { leaseErrorToHttp } from './lease-error-to-http.js';

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
