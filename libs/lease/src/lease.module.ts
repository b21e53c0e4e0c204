import { Global, Module } from '@nestjs/common';
import { DiscoveryModule, ModuleRef } from '@nestjs/core';
import { ExclusiveInterceptor } from './interceptors/exclusive.interceptor.js';
import { LEASE_DATA_SOURCE } from './lease.constants.js';
import { ModuleDataSourceRef } from './lease-data-source.js';
import { ExclusiveExplorer } from './lease.explorer.js';
import { ConfigurableLeaseModule, MODULE_OPTIONS_TOKEN } from './lease.module-definition.js';
import type { LeaseModuleOptions } from './lease.options.js';
import { LeaseService } from './lease.service.js';

/**
 * Heartbeat leases in PostgreSQL rows. Global: import it once.
 *
 * @example LeaseModule.forRoot({ heartbeatIntervalMs: 10_000, leaseTimeoutMs: 60_000 })
 * @example LeaseModule.forRootAsync({ inject: [ConfigService], useFactory: (c: ConfigService) => ({ leaseTimeoutMs: c.get('LEASE_TIMEOUT_MS') }) })
 *
 * By default it reuses the application's default `@nestjs/typeorm` DataSource; `dataSourceName` picks a named one;
 * `dataSource` (TypeORM options) makes the module create, own and destroy its own.
 */
@Global()
@Module({
  imports: [DiscoveryModule],
  providers: [
    {
      provide: LEASE_DATA_SOURCE,
      inject: [MODULE_OPTIONS_TOKEN, ModuleRef],
      useFactory: (options: LeaseModuleOptions, moduleRef: ModuleRef) => new ModuleDataSourceRef(options ?? {}, moduleRef),
    },
    LeaseService,
    ExclusiveInterceptor,
    ExclusiveExplorer,
  ],
  exports: [LeaseService, ExclusiveInterceptor],
})
export class LeaseModule extends ConfigurableLeaseModule {}
