/**
 * The bootstrap checks of the lease objects (which exist, which rights the role has, whether it may create them) and
 * their creation: statements on the statement pool, bounded like every other (see `LeaseStore`).
 */
import type pg from 'pg';
import type { BoundedStatement } from '../database/sessions.js';
import { bootstrapBoundMs, statementPoolBoundMs } from '../options/bounds.js';
import type { EngineSettings } from '../options/engine-settings.js';
import {
  consoleSchemaStatements,
  joinResultStatements,
  leaseObjectNames,
  preemptionStatements,
  schemaStatements,
  slotColumnStatements,
} from '../schema/lease-schema.js';
import { missingObjectNames, missingRights, type ObjectsRow, oldLayoutSequences, type SchemaState } from './rows.js';
import type { Statements } from './statement-texts.js';

/** Runs one statement on the statement pool (default bound: a read's; see `bootstrapBoundMs` for these). */
export type RunStatement = <R extends pg.QueryResultRow>(
  statement: Omit<BoundedStatement, 'boundMs'> & { boundMs?: number },
) => Promise<{ rows: R[]; sentAt: number }>;

export class SchemaStore {
  constructor(
    private readonly run: RunStatement,
    private readonly statements: Statements,
    private readonly options: EngineSettings,
  ) {}

  /** Which lease objects are missing, and which sequences are of the 40-bit token layout (bootstrap check). */
  async missingObjects(): Promise<SchemaState> {
    const { names } = this.statements;
    const { rows } = await this.run<ObjectsRow>({
      text: this.statements.sql.missingObjects,
      boundMs: bootstrapBoundMs(this.options),
      values: [names.lease, names.waiter, names.fencingSequence, names.waiterSequence],
    });
    return {
      missing: missingObjectNames(rows[0], this.statements.names),
      oldLayout: oldLayoutSequences(rows[0], this.statements.names),
    };
  }

  /**
   * The rights the library needs at run time that the session's role lacks, e.g. `DELETE on "public"."job_lease"`.
   * No DDL and no ownership: the owner runs the migrations, the application's role only reads and writes rows.
   */
  async missingPrivileges(): Promise<{ role: string; missing: string[] }> {
    const checks = this.statements.privileges;
    const { rows } = await this.run<{ role: string; granted: boolean[] }>({
      text: this.statements.sql.missingPrivileges,
      boundMs: bootstrapBoundMs(this.options),
      values: checks.flatMap(([, object, right]) => [object, right]),
    });
    return { role: rows[0].role, missing: missingRights(checks, rows[0].granted) };
  }

  /** Whether the session's role may create the lease objects: CREATE on the schema (on the database for a new one). */
  async mayCreateSchema(): Promise<{ role: string; allowed: boolean }> {
    const { rows } = await this.run<{ role: string; allowed: boolean }>({
      text: this.statements.sql.mayCreateSchema,
      boundMs: bootstrapBoundMs(this.options),
      values: [this.statements.names.schema, this.options.schema],
    });
    return rows[0];
  }

  /** Creates the objects (idempotent), each statement bounded like every other. */
  async createSchema(): Promise<void> {
    for (const statement of [...schemaStatements(this.options), ...consoleSchemaStatements(this.options)]) {
      await this.run({ text: statement, boundMs: statementPoolBoundMs(this.options) });
    }
  }

  /** Whether the join result table (the second migration's) is missing: an installation older than `onBusy: 'join'`. */
  async joinResultsMissing(): Promise<boolean> {
    const { rows } = await this.run<{ missing: boolean }>({
      text: 'SELECT to_regclass($1) IS NULL AS missing',
      boundMs: bootstrapBoundMs(this.options),
      values: [leaseObjectNames(this.options).result],
    });
    return rows[0].missing;
  }

  /**
   * Whether the lease table lacks a column a later migration added: `preempt_of` (an installation older than
   * `preempt: true`), `slot` (older than the slot column).
   */
  async columnMissing(column: 'preempt_of' | 'slot'): Promise<boolean> {
    const { rows } = await this.run<{ missing: boolean }>({
      text: `SELECT NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass($1)
          AND attname = $2 AND NOT attisdropped) AS missing`,
      boundMs: bootstrapBoundMs(this.options),
      values: [leaseObjectNames(this.options).lease, column],
    });
    return rows[0].missing;
  }

  /** Adds the column `columnMissing` found missing (idempotent). */
  async createColumn(column: 'preempt_of' | 'slot'): Promise<void> {
    const statements = column === 'slot' ? slotColumnStatements(this.options) : preemptionStatements(this.options);
    for (const statement of statements) {
      await this.run({ text: statement, boundMs: statementPoolBoundMs(this.options) });
    }
  }

  /** Creates the join result table (idempotent). */
  async createJoinResults(): Promise<void> {
    for (const statement of joinResultStatements(this.options)) {
      await this.run({ text: statement, boundMs: statementPoolBoundMs(this.options) });
    }
  }
}
