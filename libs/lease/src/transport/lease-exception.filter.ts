import { type ArgumentsHost, Catch } from '@nestjs/common';
import { BaseExceptionFilter } from '@nestjs/core';
import { throwError } from 'rxjs';
import { LeaseError } from '../errors/lease.errors.js';
import { leaseErrorToHttp } from './lease-error-to-http.js';
import { leaseErrorBody, leaseErrorToGraphQL } from './transport-errors.js';

/** A WebSocket client: a native one (`ws`) sends frames; a Socket.IO one emits events. */
interface WsClient {
  readyState?: unknown;
  send?: (data: string) => void;
  emit?: (event: string, data: unknown) => void;
}

/**
 * Optional: maps `LeaseError`s thrown by `@Exclusive` provider methods (or `LeaseService.run`) called from
 * undecorated handlers, the same way `@Exclusive` handlers do, on every transport: HTTP (status and `Retry-After`),
 * GraphQL (an error with `extensions.code` CONFLICT / SERVICE_UNAVAILABLE …, `retryAfterMs`), microservices (the
 * error body the caller receives) and WebSocket gateways (an `exception` message).
 * `app.useGlobalFilters(new LeaseExceptionFilter(httpAdapter))`, or
 * `{ provide: APP_FILTER, useClass: LeaseExceptionFilter }`.
 */
@Catch(LeaseError)
export class LeaseExceptionFilter extends BaseExceptionFilter {
  override catch(exception: LeaseError, host: ArgumentsHost): unknown {
    const type = host.getType<string>();
    if (type === 'graphql') return leaseErrorToGraphQL(exception);
    if (type === 'rpc') return throwError(() => leaseErrorBody(exception));
    if (type === 'ws') {
      const client = host.switchToWs().getClient<WsClient>();
      const body = leaseErrorBody(exception);
      if (typeof client.send === 'function' && client.readyState !== undefined) {
        client.send(JSON.stringify({ event: 'exception', data: body }));
      } else client.emit?.('exception', body);
      return undefined;
    }
    const response = type === 'http' ? host.switchToHttp().getResponse() : undefined;
    super.catch(leaseErrorToHttp(exception, response), host);
    return undefined;
  }
}
