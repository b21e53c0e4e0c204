export { LeaseModule } from './lease.module.js';
export { LeaseService } from './lease.service.js';
export type { Lease } from './engine/held-lease.js';
export type { LeaseModuleOptions, ResolvedLeaseOptions } from './interfaces/lease-module-options.interface.js';
export type { LeaseModuleAsyncOptions, LeaseOptionsFactory } from './lease.module-definition.js';
export type {
  AcquireOptions,
  LeaseEvent,
  LeaseEventType,
  LeaseSnapshot,
  TryAcquireOptions,
} from './interfaces/lease-event.interface.js';
export { Exclusive } from './exclusive/exclusive.decorator.js';
export { CurrentLease } from './exclusive/current-lease.decorator.js';
export type { ExclusiveKey, ExclusiveOptions, ExclusiveMetadata } from './exclusive/argument-plan.js';
export { ExclusiveInterceptor } from './exclusive/exclusive.interceptor.js';
export { LeaseExceptionFilter, leaseErrorToHttp } from './transport/lease-error-to-http.js';
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
} from './errors/lease.errors.js';
export type { LeaseLossReason } from './interfaces/lease-loss-reason.interface.js';
export { leaseMigrations, createLeaseMigrations } from './schema/lease.migrations.js';
export { leaseEntities, createLeaseEntities, type LeaseRow, type LeaseWaiterRow } from './schema/lease.entities.js';
export { MAX_TARGET_KEY_BYTES } from './options/call-input.js';
