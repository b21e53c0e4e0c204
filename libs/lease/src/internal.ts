/**
 * The private entry point of this repository's tests and benchmarks (never in the package's `exports`): what they need
 * of the library's internals, in one place, so that moving a file inside `src` changes this file and no test.
 */
export { LeaseStore, type AcquireRequest, type AcquiredRow, type Refusal } from './lease-store.js';
export { resolveLeaseOptions } from './lease.options.js';
export { columnCheckName, schemaStatements } from './lease-schema.js';
export { heartbeatRunning, interceptHeadWakeups } from './service-probes.js';
