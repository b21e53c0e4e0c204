import { createParamDecorator, type ExecutionContext } from '@nestjs/common';
import { LEASE_OF_REQUEST } from '../lease.constants.js';

/**
 * Injects the lease of an `@Exclusive` controller handler. Undefined on handlers without `@Exclusive`.
 *
 * @example async build(@Param('id') id: string, @CurrentLease() lease: Lease) { … lease.signal … }
 */
export const CurrentLease = createParamDecorator((_: unknown, context: ExecutionContext) => {
  const holder = context.getType() === 'http' ? context.switchToHttp().getRequest() : context.getArgByIndex(0);
  return holder && typeof holder === 'object' ? (holder as Record<symbol, unknown>)[LEASE_OF_REQUEST] : undefined;
});
