import { createHash } from 'node:crypto';
import type { MigrationInterface, QueryRunner } from 'typeorm';
import {
  consoleSchemaStatements,
  dropConsoleSchemaStatements,
  dropSchemaStatements,
  schemaStatements,
} from './lease-schema.js';
import { type LeaseNames, resolveLeaseNames } from '../options/lease-names.js';

/** When the first version of the schema was written (TypeORM orders migrations by this suffix). */
const CREATED_AT = 1764374400000;
/** When the operator's tables were added (issue 26). */
const CONSOLE_CREATED_AT = 1764633600000;

/**
 * TypeORM migrations creating the lease table, the waiter table and their sequences, then the operator's tables
 * (audit, drains, journal: README "Operator's console"), for the given names (validated like the module's options).
 * Use the same names as in `LeaseModule.forRoot()`.
 */
export function createLeaseMigrations(names: Partial<LeaseNames> = {}): Array<new () => MigrationInterface> {
  const fixed: LeaseNames = resolveLeaseNames(names);
  const isDefault =
    fixed.schema === 'public' && fixed.tableName === 'job_lease' && fixed.waiterTableName === 'job_lease_waiter';
  const suffix = isDefault ? '' : createHash('sha1').update(JSON.stringify(fixed)).digest('hex').slice(0, 8);
  return [
    migration('CreateLeaseTables', `${suffix}${CREATED_AT}`, schemaStatements(fixed), dropSchemaStatements(fixed)),
    migration(
      'CreateLeaseConsoleTables',
      `${suffix}${CONSOLE_CREATED_AT}`,
      consoleSchemaStatements(fixed),
      dropConsoleSchemaStatements(fixed),
    ),
  ];
}

/** A migration class `className`, named `className` + `stamp`: runs `up` one by one, `down` to revert. */
function migration(
  className: string,
  stamp: string,
  up: readonly string[],
  down: readonly string[],
): new () => MigrationInterface {
  const name = `${className}${stamp}`;
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
