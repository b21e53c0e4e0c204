/**
 * `nest-pg-lease/testing`: what an application needs to test its own code that uses leases — in memory for unit
 * tests (`LeaseTestingModule.forRoot()`), on a real PostgreSQL without Docker for integration tests
 * (`startTestPostgres`, `useLeaseDatabase`, `LeaseTestingModule.forPostgres`, and the faults `takeOver`, `expire`,
 * `stallDatabase`).
 */
export { LeaseTestingModule, createTestingLeaseService } from './lease-testing.module.js';
export { LeaseTestingController } from './lease-testing.controller.js';
export type { FencedTransaction, LeaseTestingOptions } from './memory-leases.js';
export { testLeaseOptions } from './test-lease-options.js';
export { startTestPostgres, useLeaseDatabase, type TestDatabase, type TestPostgres } from './test-postgres.js';
export { EmbeddedPostgresError, type StartPostgresOptions } from './embedded-postgres.js';
export {
  takeOver,
  expire,
  stallDatabase,
  type DatabaseStall,
  type LeaseTableNames,
  type TakeOverOptions,
} from './lease-faults.js';
