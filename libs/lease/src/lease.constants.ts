/** Injection token of the TypeORM DataSource the lease service uses. */
export const LEASE_DATA_SOURCE = Symbol('LEASE_DATA_SOURCE');
/** Metadata key written by `@Exclusive`. */
export const EXCLUSIVE_METADATA = 'nest-pg-lease:exclusive';
/** Marks a provider method the explorer has already wrapped. */
export const EXCLUSIVE_WRAPPED = Symbol('nest-pg-lease:wrapped');
/** Where the interceptor leaves the lease on the request, for `@CurrentLease()`. */
export const LEASE_OF_REQUEST = Symbol('nest-pg-lease:lease');
