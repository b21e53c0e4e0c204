import { createParamDecorator } from '@nestjs/common';

/**
 * Marks the parameter `@Exclusive` fills with the handler call's lease. The value comes from the wrapper the
 * decorator puts around the method, once the lease is held (after pipes, so the key can use the piped values); this
 * factory only makes the parameter known to Nest.
 */
export const currentLeaseFactory = (): undefined => undefined;

/**
 * Injects the lease of an `@Exclusive` handler (HTTP, WebSocket or microservice): each call gets its own. Undefined
 * on handlers without `@Exclusive`.
 *
 * @example async build(@Param('id', ParseIntPipe) id: number, @CurrentLease() lease: Lease) { … lease.signal … }
 */
export const CurrentLease = createParamDecorator(currentLeaseFactory);
