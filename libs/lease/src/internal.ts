/**
 * The private entry point of this repository's tests and benchmarks (never in the package's `exports`): what they need
 * of the library's internals, in one place, so that moving a file inside `src` changes this file and no test.
 */
export { LeaseStore } from './store/lease-store.js';
export type { AcquireRequest, AcquiredRow, Refusal, RowRef } from './store/store.types.js';
export { ownRow } from './options/slot-limits.js';
export { PARK_WINDOW_MS } from './options/limits.js';
export { DRAIN_REFRESH_MS } from './options/bounds.js';
export { resolveLeaseOptions } from './options/resolve-lease-options.js';
export { mergeLeaseOptions } from './options/option-groups.js';
export { columnCheckName, schemaStatements, slotColumnStatements } from './schema/lease-schema.js';
export {
  heartbeatRunning,
  interceptHeadWakeups,
  useParkWindow,
  joinersWaiting,
  pauseRenewals,
  purgeFreeRows,
  useStatementFaults,
} from './service-probes.js';
export type { StatementFaults } from './store/sql/statement-faults.js';
export { DedicatedConnection } from './database/dedicated-connection.js';
export { formatHeadPayload, parseHeadPayload } from './database/head-payload.js';
export { useMultiKeyOrder } from './engine/multi-key-run.js';
