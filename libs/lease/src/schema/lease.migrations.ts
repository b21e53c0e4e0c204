import type { MigrationInterface, QueryRunner } from 'typeorm';
import {
  baseSchemaStatements,
  consoleSchemaStatements,
  dropConsoleSchemaStatements,
  dropSchemaStatements,
  dropSlotColumnStatements,
  joinResultStatements,
  leaseObjectNames,
  slotLimitStatement,
  preemptionStatements,
  slotColumnStatements,
  tokenLayoutStatement,
} from './lease-schema.js';
import { type LeaseNames, resolveLeaseNames } from '../options/lease-names.js';
import {
  consoleTablesMigrationName,
  createTablesMigrationName,
  joinResultsMigrationName,
  slotLimitMigrationName,
  preemptionMigrationName,
  slotColumnMigrationName,
  tokenLayoutMigrationName,
} from './migration-names.js';

/**
 * TypeORM migrations for the given names (validated like the module's options; use the same names as in
 * `LeaseModule.forRoot()`), in order: the lease table, the waiter table and their sequences; the join result table
 * (`onBusy: 'join'`); the operator's tables (audit, drains, journal: docs/console.md); then the 47-bit
 * fencing token layout (a no-op on tables the first one created; on tables of the 40-bit layout before it, it moves the sequences, see
 * docs/failover.md, "Fencing token layout"); then the semaphores' `slot_limit` column (a no-op on tables the first one created),
 * then the preemption column (`preempt: true`, docs/preemption.md); then the slot column, which makes a lease row
 * `(target_id, slot)` and converts the rows of the tables before it (see `slotColumnStatements`).
 */
export function createLeaseMigrations(names: Partial<LeaseNames> = {}): Array<new () => MigrationInterface> {
  const fixed: LeaseNames = resolveLeaseNames(names);
  return [
    migration(
      'CreateLeaseTables',
      createTablesMigrationName(fixed),
      baseSchemaStatements(fixed),
      dropSchemaStatements(fixed),
    ),
    migration('AddLeaseJoinResults', joinResultsMigrationName(fixed), joinResultStatements(fixed), [
      `DROP TABLE IF EXISTS ${leaseObjectNames(fixed).result}`,
    ]),
    migration(
      'CreateLeaseConsoleTables',
      consoleTablesMigrationName(fixed),
      consoleSchemaStatements(fixed),
      dropConsoleSchemaStatements(fixed),
    ),
    // One-way: the sequences stay past 2^40, so a process of the 40-bit layout keeps failing closed instead of drawing lower tokens.
    migration('LeaseTokenLayout', tokenLayoutMigrationName(fixed), [tokenLayoutStatement(fixed)], []),
    migration(
      'AddLeaseSlotLimit',
      slotLimitMigrationName(fixed),
      [slotLimitStatement(fixed)],
      [`ALTER TABLE ${leaseObjectNames(fixed).lease} DROP COLUMN IF EXISTS slot_limit`],
    ),
    migration('AddLeasePreemption', preemptionMigrationName(fixed), preemptionStatements(fixed), [
      `ALTER TABLE ${leaseObjectNames(fixed).lease} DROP COLUMN IF EXISTS preempt_of`,
    ]),
    migration(
      'AddLeaseSlotColumn',
      slotColumnMigrationName(fixed),
      slotColumnStatements(fixed),
      dropSlotColumnStatements(fixed),
    ),
  ];
}

/** A migration class `className`, named `name`: runs `up` one by one, `down` to revert. */
function migration(
  className: string,
  name: string,
  up: readonly string[],
  down: readonly string[],
): new () => MigrationInterface {
  const Migration = class implements MigrationInterface {
    readonly name = name;

    async up(queryRunner: QueryRunner): Promise<void> {
      for (const statement of up) await queryRunner.query(statement);
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      for (const statement of down) await queryRunner.query(statement);
    }
  };
  Object.defineProperty(Migration, 'name', { value: className });
  return Migration;
}

/** Migrations for the default names (`public.job_lease`, `public.job_lease_waiter`). */
export const leaseMigrations = createLeaseMigrations();
