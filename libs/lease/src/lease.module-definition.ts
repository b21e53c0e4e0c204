import { type ConfigurableModuleAsyncOptions, ConfigurableModuleBuilder } from '@nestjs/common';
import type { LeaseModuleOptions } from './interfaces/lease-module-options.interface.js';

export const {
  ConfigurableModuleClass: ConfigurableLeaseModule,
  MODULE_OPTIONS_TOKEN,
  OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<LeaseModuleOptions>({ moduleName: 'Lease' })
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createLeaseOptions')
  .build();

/**
 * A class that `LeaseModule.forRootAsync({ useClass })` (or `useExisting`) instantiates for the options.
 *
 * @example
 * class LeaseConfig implements LeaseOptionsFactory {
 *   createLeaseOptions() { return { leaseTimeoutMs: 60_000 }; }
 * }
 */
export interface LeaseOptionsFactory {
  createLeaseOptions(): LeaseModuleOptions | Promise<LeaseModuleOptions>;
}

/** What `LeaseModule.forRootAsync()` takes: `imports`, `inject` with `useFactory`, or `useClass` / `useExisting`. */
export type LeaseModuleAsyncOptions = ConfigurableModuleAsyncOptions<LeaseModuleOptions, 'createLeaseOptions'>;
