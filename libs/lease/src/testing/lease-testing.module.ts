import { type DynamicModule, Global, Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { LeaseEngine } from '../engine/lease-engine.js';
import { EngineRef, LEASE_ENGINE_REF } from '../exclusive/engine-registry.js';
import { ExclusiveExplorer } from '../exclusive/exclusive.explorer.js';
import { ExclusiveInterceptor } from '../exclusive/exclusive.interceptor.js';
import type { LeaseModuleOptions } from '../interfaces/lease-module-options.interface.js';
import { LeaseModule } from '../lease.module.js';
import { LeaseService } from '../lease.service.js';
import { type LeaseTestingOptions, MemoryLeases } from './memory-leases.js';
import { LeaseTestingController } from './lease-testing.controller.js';
import { testLeaseOptions } from './test-lease-options.js';
import { mergeLeaseOptions } from '../options/option-groups.js';

/**
 * Leases for an application's own tests. `forRoot()`: in memory, no PostgreSQL — the library's engine over the
 * memory backend; `LeaseService` and every `@Exclusive` method of the testing module use it, and
 * `LeaseTestingController` plays the other processes.
 * `forPostgres(url)`: the real `LeaseModule` on a database of the test's, with short timings and `createSchema`.
 *
 * @example
 * Test.createTestingModule({ imports: [LeaseTestingModule.forRoot()], providers: [ReportService] })
 */
@Global()
@Module({})
export class LeaseTestingModule {
  static forRoot(options: LeaseTestingOptions = {}): DynamicModule {
    return {
      module: LeaseTestingModule,
      global: true,
      imports: [DiscoveryModule],
      providers: [
        { provide: MemoryLeases, useFactory: () => new MemoryLeases(options) },
        // The doors' token: the explorer registers this engine for the @Exclusive methods to find. Nest runs its
        // lifecycle hooks (bootstrap, the drain at close).
        { provide: LeaseEngine, inject: [MemoryLeases], useFactory: (leases: MemoryLeases) => leases.engine },
        {
          provide: LeaseService,
          inject: [LeaseEngine],
          useFactory: (engine: LeaseEngine) => new LeaseService(engine),
        },
        {
          provide: LEASE_ENGINE_REF,
          inject: [LeaseEngine],
          useFactory: (engine: LeaseEngine) => new EngineRef(engine),
        },
        LeaseTestingController,
        ExclusiveInterceptor,
        ExclusiveExplorer,
      ],
      exports: [LeaseService, LeaseTestingController, ExclusiveInterceptor, LEASE_ENGINE_REF],
    };
  }

  /**
   * The real `LeaseModule` on the database at `url` (a `useLeaseDatabase()` one, say), owning its
   * DataSource, with `testLeaseOptions()` and then `options` applied (group by group: `{ timing: { leaseTimeoutMs } }`
   * keeps the other test timings).
   */
  static forPostgres(url: string, options: LeaseModuleOptions = {}): DynamicModule {
    const own: LeaseModuleOptions = { connections: { dataSource: { type: 'postgres', url } } };
    return LeaseModule.forRoot(mergeLeaseOptions(own, testLeaseOptions(), options));
  }
}

/** An in-memory `LeaseService` outside Nest (`LeaseTestingController.of(service)` gives its controls). */
export function createTestingLeaseService(options: LeaseTestingOptions = {}): LeaseService {
  const { engine } = new MemoryLeases(options);
  // Outside Nest nothing runs the bootstrap: the memory backend's answers at once, the engine starts here.
  void engine.init();
  return new LeaseService(engine);
}
