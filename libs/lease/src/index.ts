export { LeaseModule } from './lease.module.js';
export { LeaseService } from './lease.service.js';
export type { Lease } from './lease.js';
export type { LeaseModuleOptions, ResolvedLeaseOptions } from './lease.options.js';
export type { LeaseModuleAsyncOptions, LeaseOptionsFactory } from './lease.module-definition.js';
export type { AcquireOptions, LeaseEvent, LeaseEventType, LeaseSnapshot, TryAcquireOptions } from './lease.types.js';
export { Exclusive } from './decorators/exclusive.decorator.js';
export { CurrentLease } from './decorators/current-lease.decorator.js';
export type { ExclusiveKey, ExclusiveOptions, ExclusiveMetadata } from './exclusive-keys.js';
export { ExclusiveInterceptor } from './interceptors/exclusive.interceptor.js';
export { LeaseExceptionFilter, leaseErrorToHttp } from './lease-http.js';
export {
  LeaseError,
  LeaseBusyError,
  LeaseLostError,
  LeaseWaitTimeoutError,
  LeaseConfigError,
  LeaseArgumentError,
  LeaseKeyError,
  LeaseShutdownError,
  LeaseQueueFullError,
  LeaseUnavailableError,
  type LeaseLossReason,
} from './errors.js';
export { leaseMigrations, createLeaseMigrations } from './migrations/create-lease-tables.js';
export { leaseEntities, createLeaseEntities, type LeaseRow, type LeaseWaiterRow } from './lease.entities.js';
export { MAX_TARGET_KEY_BYTES } from './target-key.js';
