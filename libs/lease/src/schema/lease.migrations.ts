import { createHash } from 'node:crypto';
import type { MigrationInterface, QueryRunner } from 'typeorm';
import { baseSchemaStatements, dropSchemaStatements, joinResultStatements, leaseObjectNames } from './lease-schema.js';
import { type LeaseNames, resolveLeaseNames } from '../options/lease-names.js';

/** When the first version of the schema was written (TypeORM orders migrations by this suffix). */
const CREATED_AT = 1764374400000;
/** When the join result table was added (issue 24: `onBusy: 'join'` across processes). */
const JOIN_RESULTS_AT = 1764633600000;

/**
 * TypeORM migrations creating the lease table, the waiter table and their sequences, then the join result table, for
 * the given names (validated like the module's options). Use the same names as in `LeaseModule.forRoot()`.
 */
export function createLeaseMigrations(names: Partial<LeaseNames> = {}): Array<new () => MigrationInterface> {
  const fixed: LeaseNames = resolveLeaseNames(names);
  const isDefault =
    fixed.schema === 'public' && fixed.tableName === 'job_lease' && fixed.waiterTableName === 'job_lease_waiter';
  const suffix = isDefault ? '' : createHash('sha1').update(JSON.stringify(fixed)).digest('hex').slice(0, 8);
  const name = `CreateLeaseTables${suffix}${CREATED_AT}`;
  class CreateLeaseTables implements MigrationInterface {
    readonly name = name;

    async up(queryRunner: QueryRunner): Promise<void> {
      for (const statement of baseSchemaStatements(fixed)) await queryRunner.query(statement);
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      for (const statement of dropSchemaStatements(fixed)) await queryRunner.query(statement);
    }
  }
  class AddLeaseJoinResults implements MigrationInterface {
    readonly name = `AddLeaseJoinResults${suffix}${JOIN_RESULTS_AT}`;

    async up(queryRunner: QueryRunner): Promise<void> {
      for (const statement of joinResultStatements(fixed)) await queryRunner.query(statement);
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(`DROP TABLE IF EXISTS ${leaseObjectNames(fixed).result}`);
    }
  }
  return [CreateLeaseTables, AddLeaseJoinResults];
}

/** Migrations for the default names (`public.job_lease`, `public.job_lease_waiter`). */
export const leaseMigrations = createLeaseMigrations();
