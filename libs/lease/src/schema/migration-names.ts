/**
 * The names of the lease migrations (TypeORM records and orders them by name and timestamp suffix): one set per set of
 * lease names. Private: bootstrap names the layout migration in its error.
 */
import { createHash } from 'node:crypto';
import { type LeaseNames, resolveLeaseNames } from '../options/lease-names.js';

/** When the first version of the schema was written (TypeORM orders migrations by this suffix). */
const CREATED_AT = 1764374400000;

/** When the join result table was added (`onBusy: 'join'` across processes). */
const JOIN_RESULTS_AT = 1764633600000;

/** When the operator's tables (audit, drains, journal) were added. */
const CONSOLE_TABLES_AT = 1764720000000;

/** When the 47-bit fencing token layout came. */
const TOKEN_LAYOUT_AT = 1796169600000;

/** When the semaphores' slot_limit column came. */
const SLOT_LIMIT_AT = 1796256000000;
/** When the preemption column came (`preempt: true`). */
const PREEMPTION_AT = 1796342400000;
/** When a lease row became `(target_id, slot)` (issue 39). */
const SLOT_COLUMN_AT = 1796428800000;

/** The name of the first migration (the tables and sequences) for these names. */
export function createTablesMigrationName(names: Partial<LeaseNames> = {}): string {
  return `CreateLeaseTables${migrationSuffix(resolveLeaseNames(names))}${CREATED_AT}`;
}

/** The name of the join result table's migration for these names. */
export function joinResultsMigrationName(names: Partial<LeaseNames> = {}): string {
  return `AddLeaseJoinResults${migrationSuffix(resolveLeaseNames(names))}${JOIN_RESULTS_AT}`;
}

/** The name of the operator's tables' migration for these names. */
export function consoleTablesMigrationName(names: Partial<LeaseNames> = {}): string {
  return `CreateLeaseConsoleTables${migrationSuffix(resolveLeaseNames(names))}${CONSOLE_TABLES_AT}`;
}

/** The name of the token layout migration for these names (bootstrap names it when it has not run). */
export function tokenLayoutMigrationName(names: Partial<LeaseNames> = {}): string {
  return `LeaseTokenLayout${migrationSuffix(resolveLeaseNames(names))}${TOKEN_LAYOUT_AT}`;
}

/** The name of the slot_limit column's migration for these names. */
export function slotLimitMigrationName(names: Partial<LeaseNames> = {}): string {
  return `AddLeaseSlotLimit${migrationSuffix(resolveLeaseNames(names))}${SLOT_LIMIT_AT}`;
}

/** '' for the default names, else a hash of them, so each set of names has migrations of its own. */
function migrationSuffix(fixed: LeaseNames): string {
  const isDefault =
    fixed.schema === 'public' && fixed.tableName === 'job_lease' && fixed.waiterTableName === 'job_lease_waiter';
  return isDefault ? '' : createHash('sha1').update(JSON.stringify(fixed)).digest('hex').slice(0, 8);
}

/** The name of the preemption column's migration for these names (bootstrap names it when it has not run). */
export function preemptionMigrationName(names: Partial<LeaseNames> = {}): string {
  return `AddLeasePreemption${migrationSuffix(resolveLeaseNames(names))}${PREEMPTION_AT}`;
}

/** The name of the slot column's migration for these names (bootstrap names it when it has not run). */
export function slotColumnMigrationName(names: Partial<LeaseNames> = {}): string {
  return `AddLeaseSlotColumn${migrationSuffix(resolveLeaseNames(names))}${SLOT_COLUMN_AT}`;
}
