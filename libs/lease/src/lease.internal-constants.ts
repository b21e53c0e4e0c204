/** Injection token of the TypeORM DataSource the lease service uses. */
export const LEASE_DATA_SOURCE = Symbol('LEASE_DATA_SOURCE');
/** Metadata key written by `@Exclusive`. */
export const EXCLUSIVE_METADATA = 'nest-pg-lease:exclusive';
/** Where `@Exclusive` keeps the undecorated method on the wrapper that replaces it. */
export const ORIGINAL_METHOD = Symbol('nest-pg-lease:original');
/** `@LeaderElection`'s metadata on a class: `{ targetKey, priority?, keyTemplate? }`. */
export const LEADER_METADATA = 'nest-pg-lease:leader';
