import type { MigrationInterface, QueryRunner } from 'typeorm';
import {
  baseSchemaStatements,
  dropSchemaStatements,
  joinResultStatements,
  leaseObjectNames,
  tokenLayoutStatement,
} from './lease-schema.js';
import { type LeaseNames, resolveLeaseNames } from '../options/lease-names.js';
import { createTablesMigrationName, joinResultsMigrationName, tokenLayoutMigrationName } from './migration-names.js';

/**
 * TypeORM migrations for the given names (validated like the module's options; use the same names as in
 * `LeaseModule.forRoot()`): the lease table, the waiter table and their sequences; the join result table; then the
 * 47-bit fencing token layout (a no-op on tables the first one created; on tables of 0.2 it moves the sequences, see
 * the README's "Fencing token layout").
 */
export function createLeaseMigrations(names: Partial<LeaseNames> = {}): Array<new () => MigrationInterface> {
  const fixed: LeaseNames = resolveLeaseNames(names);
  const name = createTablesMigrationName(fixed);
  const layoutName = tokenLayoutMigrationName(fixed);
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
    readonly name = joinResultsMigrationName(fixed);

    async up(queryRunner: QueryRunner): Promise<void> {
      for (const statement of joinResultStatements(fixed)) await queryRunner.query(statement);
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(`DROP TABLE IF EXISTS ${leaseObjectNames(fixed).result}`);
    }
  }
  class LeaseTokenLayout implements MigrationInterface {
    readonly name = layoutName;

    async up(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(tokenLayoutStatement(fixed));
    }

    /** One-way: the sequences stay past 2^40, so a process of 0.2 keeps failing closed instead of drawing lower tokens. */
    async down(): Promise<void> {}
  }
  return [CreateLeaseTables, AddLeaseJoinResults, LeaseTokenLayout];
}

/** Migrations for the default names (`public.job_lease`, `public.job_lease_waiter`). */
export const leaseMigrations = createLeaseMigrations();
