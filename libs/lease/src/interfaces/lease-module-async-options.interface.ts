import type { ConfigurableModuleAsyncOptions } from '@nestjs/common';
import type { LeaseModuleOptions } from './lease-module-options.interface.js';

/**
 * A class that `LeaseModule.forRootAsync({ useClass })` (or `useExisting`) instantiates for the options.
 *
 * @example
 * class LeaseConfig implements LeaseOptionsFactory {
 *   createLeaseOptions() { return { timing: { leaseTimeoutMs: 60_000 } }; }
 * }
 */
export interface LeaseOptionsFactory {
  createLeaseOptions(): LeaseModuleOptions | Promise<LeaseModuleOptions>;
}

/** What `LeaseModule.forRootAsync()` takes: `imports`, `inject` with `useFactory`, or `useClass` / `useExisting`. */
export type LeaseModuleAsyncOptions = ConfigurableModuleAsyncOptions<LeaseModuleOptions, 'createLeaseOptions'>;
