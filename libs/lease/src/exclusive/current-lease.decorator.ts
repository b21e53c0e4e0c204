import { createParamDecorator } from '@nestjs/common';
import { currentLeaseFactory } from './current-lease-factory.js';

/**
 * Injects the lease of an `@Exclusive` handler (HTTP, WebSocket, microservice or GraphQL): each call gets its own. Undefined
 * on handlers without `@Exclusive`.
 *
 * @example async build(@Param('id', ParseIntPipe) id: number, @CurrentLease() lease: Lease) { … lease.signal … }
 */
export const CurrentLease = createParamDecorator(currentLeaseFactory);
