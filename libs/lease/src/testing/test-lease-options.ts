import type { LeaseModuleOptions } from '../interfaces/lease-module-options.interface.js';

/**
 * `LeaseModule` options for tests on a real PostgreSQL: the tables are created (`createSchema`), and the timings are
 * short, so a lost lease is noticed within about a second rather than a minute.
 */
export function testLeaseOptions(): LeaseModuleOptions {
  return {
    timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000, waiterTimeoutMs: 600, waitPollIntervalMs: 200 },
    tables: { createSchema: true },
  };
}
