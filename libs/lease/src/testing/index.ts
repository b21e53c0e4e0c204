/**
 * `nest-pg-lease/testing`: what an application needs to test its own code that uses leases — in memory for unit
 * tests (`LeaseTestingModule.forRoot()`), on a PostgreSQL the tests provide for integration tests (`useLeaseDatabase`,
 * `LeaseTestingModule.forPostgres`, and the faults `takeOver`, `expire`, `stallDatabase`). It starts no server.
 */
export { LeaseTestingModule, createTestingLeaseService } from './lease-testing.module.js';
export { LeaseTestingController } from './lease-testing.controller.js';
export type { FencedTransaction, LeaseTestingOptions } from './memory-leases.js';
export { testLeaseOptions } from './test-lease-options.js';
export { useLeaseDatabase } from './use-lease-database.js';
export {
  takeOver,
  expire,
  stallDatabase,
  type DatabaseStall,
  type LeaseTableNames,
  type TakeOverOptions,
} from './lease-faults.js';
