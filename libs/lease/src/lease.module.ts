import { Global, Module } from '@nestjs/common';
import { DiscoveryModule, ModuleRef } from '@nestjs/core';
import { ExclusiveInterceptor } from './exclusive/exclusive.interceptor.js';
import { LEASE_DATA_SOURCE } from './lease.internal-constants.js';
import { type LeaseDataSourceRef, ModuleDataSourceRef } from './database/lease-database.js';
import { LeaseEngine } from './engine/lease-engine.js';
import { ExclusiveExplorer } from './exclusive/exclusive.explorer.js';
import { LeaderExplorer } from './leader/leader.explorer.js';
import { EngineRef, LEASE_ENGINE_REF } from './exclusive/engine-registry.js';
import { ConfigurableLeaseModule, MODULE_OPTIONS_TOKEN } from './lease.module-definition.js';
import type { LeaseModuleOptions } from './interfaces/lease-module-options.interface.js';
import { LeaseService } from './lease.service.js';
import { LeaseOperator } from './console/lease-operator.js';
import { candidatesOf } from './engine-of.js';
import { LeaderCandidates } from './leader/candidates.js';

/**
 * Heartbeat leases in PostgreSQL rows. Import it once, in the root module. It is global so that `LeaseService` can be
 * injected everywhere, and because the explorer relies on it: Nest runs global modules' `onModuleInit` hooks first,
 * so the engine is initialized and registered before any other provider's `onModuleInit` calls an `@Exclusive` method.
 *
 * @example LeaseModule.forRoot({ timing: { heartbeatIntervalMs: 10_000, leaseTimeoutMs: 60_000 } })
 * @example
 * LeaseModule.forRootAsync({
 *   inject: [ConfigService],
 *   useFactory: (c: ConfigService) => ({ timing: { leaseTimeoutMs: c.get('LEASE_TIMEOUT_MS') } }),
 * })
 *
 * By default it reuses the application's default `@nestjs/typeorm` DataSource; `connections.dataSourceName` picks a
 * named one; `connections.dataSource` (TypeORM options) makes the module create, own and destroy its own.
 */
@Global()
@Module({
  imports: [DiscoveryModule],
  providers: [
    {
      provide: LEASE_DATA_SOURCE,
      inject: [MODULE_OPTIONS_TOKEN, ModuleRef],
      useFactory: (options: LeaseModuleOptions, moduleRef: ModuleRef) =>
        new ModuleDataSourceRef(options ?? {}, moduleRef),
    },
    // The engine is the provider with the lifecycle hooks (init at bootstrap, close at shutdown); LeaseService is its
    // public face, and the doors use the engine itself.
    {
      provide: LeaseEngine,
      inject: [LEASE_DATA_SOURCE, MODULE_OPTIONS_TOKEN],
      useFactory: (source: LeaseDataSourceRef, options: LeaseModuleOptions) => new LeaseEngine(source, options ?? {}),
    },
    { provide: LeaseService, inject: [LeaseEngine], useFactory: (engine: LeaseEngine) => new LeaseService(engine) },
    // The operator's API (force-release, drains, timeline): guard whoever may call it.
    { provide: LeaseOperator, inject: [LeaseService], useFactory: (leases: LeaseService) => new LeaseOperator(leases) },
    // The application's leader candidates (elect(), @LeaderElection, @Sticky): the ones its LeaseService holds.
    { provide: LeaderCandidates, inject: [LeaseService], useFactory: (leases: LeaseService) => candidatesOf(leases) },
    // The application's entry in the engine registry, which the injector hands every instance of a class with an
    // @Exclusive method (see engine-registry.ts); the explorer attaches the service's candidates to it.
    { provide: LEASE_ENGINE_REF, inject: [LeaseEngine], useFactory: (engine: LeaseEngine) => new EngineRef(engine) },
    ExclusiveInterceptor,
    ExclusiveExplorer,
    LeaderExplorer,
  ],
  exports: [LeaseService, LeaseOperator, ExclusiveInterceptor, LEASE_ENGINE_REF],
})
export class LeaseModule extends ConfigurableLeaseModule {}
