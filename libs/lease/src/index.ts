/**
 * The package's public entry: `export *` of the wholly public files, nothing else. Every other file of src is private
 * (tests and benchmarks reach internals through internal.ts, which the package does not export).
 */
export * from './lease.module.js';
export * from './lease.service.js';
export * from './console/lease-operator.js';
export * from './console/lease-console.module.js';
export * from './interfaces/lease-operator.interface.js';
export * from './lease.constants.js';
export * from './interfaces/lease.interface.js';
export * from './interfaces/multi-lease.interface.js';
export * from './interfaces/lease-module-options.interface.js';
export * from './interfaces/lease-module-async-options.interface.js';
export * from './interfaces/acquire-options.interface.js';
export * from './interfaces/busy-policy.interface.js';
export * from './interfaces/lease-event.interface.js';
export * from './interfaces/lease-loss-reason.interface.js';
export * from './interfaces/exclusive-options.interface.js';
export * from './interfaces/leader-election.interface.js';
export * from './exclusive/exclusive.decorator.js';
export * from './exclusive/sticky.decorator.js';
export * from './exclusive/current-lease.decorator.js';
export * from './exclusive/exclusive.interceptor.js';
export * from './leader/leader-election.decorator.js';
export * from './transport/lease-error-to-http.js';
export * from './transport/lease-exception.filter.js';
export * from './errors/lease.errors.js';
export * from './schema/lease.migrations.js';
export * from './schema/lease.entities.js';
