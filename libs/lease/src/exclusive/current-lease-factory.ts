/**
 * Marks the parameter `@Exclusive` fills with the handler call's lease. The value comes from the wrapper the
 * decorator puts around the method, once the lease is held (after pipes, so the key can use the piped values); this
 * factory only makes the parameter known to Nest.
 */
export const currentLeaseFactory = (): undefined => undefined;
