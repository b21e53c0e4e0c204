/**
 * What the engine checks at bootstrap, before the first lease: the DataSource, the tables (created when
 * `createSchema` is set and some are missing), the role's rights, and the system identifier the leases are acquired
 * under. Collaborators given explicitly.
 */
import type { Logger } from '@nestjs/common';
import type { LeaseDatabase } from '../database/lease-database.js';
import { LeaseConfigError } from '../errors/lease.errors.js';
import type { ResolvedLeaseOptions } from '../interfaces/lease-module-options.interface.js';
import {
  grantStatements,
  joinResultStatements,
  leaseObjectNames,
  preemptionStatements,
  schemaStatements,
  tokenLayoutStatement,
} from '../schema/lease-schema.js';
import { preemptionMigrationName, tokenLayoutMigrationName } from '../schema/migration-names.js';
import type { LeaseStore } from '../store/lease-store.js';
import { messages } from '../errors/lease.messages.js';

export class BootstrapChecks {
  constructor(
    private readonly database: LeaseDatabase,
    private readonly store: LeaseStore,
    private readonly options: ResolvedLeaseOptions,
    private readonly logger: Logger,
  ) {}

  /** Checks the DataSource and the tables (creating them when `createSchema` is set). Nest calls it at bootstrap. */
  /** Runs every check; resolves with the system identifier of the database cluster (null: not readable). */
  async run(): Promise<string | null> {
    await this.database.open();
    if (this.options.pooler === 'transaction' && !this.options.sessionUrl) {
      this.logger.warn(
        "pooler: 'transaction' without sessionUrl: heartbeats go through the pooler (a saturated pooler can delay " +
          'them past the lease timeout) and LISTEN/NOTIFY is off (waiters poll every ' +
          `${this.options.waitPollIntervalMs} ms); give sessionUrl, a direct or session-mode connection string, ` +
          'for both',
      );
    }
    if (this.options.createSchema) await this.createSchema();
    const { missing, oldLayout } = await this.store.schema.missingObjects();
    if (missing.length > 0) throw this.missingError(missing);
    if (oldLayout.length > 0) {
      throw new LeaseConfigError(
        messages.tokenLayoutMissing(
          oldLayout.join(', '),
          tokenLayoutMigrationName(this.options),
          tokenLayoutStatement(this.options),
        ),
      );
    }
    await this.checkJoinResults();
    await this.checkPreemption();
    await this.checkPrivileges();
    await this.probeTimeline();
    return (await this.store.serverHistory()).systemId;
  }

  /**
   * The objects missing, and what to do. Tables without their sequences are what TypeORM's `synchronize: true` builds
   * from `leaseEntities` before the migrations ran (entities cannot declare sequences): name the sequences and the
   * exact statements that create them.
   */
  private missingError(missing: readonly string[]): LeaseConfigError {
    const n = leaseObjectNames(this.options);
    const sequences = [n.fencingSequence, n.waiterSequence];
    if (!missing.every((name) => sequences.includes(name))) {
      return new LeaseConfigError(messages.tablesMissing(missing.join(', ')));
    }
    const statements = schemaStatements(this.options).filter(
      (statement) => statement.startsWith('CREATE SEQUENCE') && missing.some((name) => statement.includes(name)),
    );
    return new LeaseConfigError(messages.sequencesMissing(missing.join(', '), statements.join('; ')));
  }

  /**
   * `createSchema`: creates the objects only when some are missing — `CREATE … IF NOT EXISTS` still needs the CREATE
   * right — so a least-privileged role starts fine where the owner ran the migrations.
   */
  private async createSchema(): Promise<void> {
    const { missing, oldLayout } = await this.store.schema.missingObjects();
    if (missing.length === 0 && oldLayout.length === 0) return;
    const { role, allowed } = await this.store.schema.mayCreateSchema();
    if (!allowed) {
      throw new LeaseConfigError(messages.createSchemaNotAllowed(role, this.options.schema));
    }
    await this.store.schema.createSchema();
  }

  /**
   * The join result table came with a second migration: an installation made before it has the other objects only.
   * `createSchema` adds it; otherwise the message names the migration to run.
   */
  private async checkJoinResults(): Promise<void> {
    if (!(await this.store.schema.joinResultsMissing())) return;
    if (!this.options.createSchema) {
      const [statement] = joinResultStatements(this.options);
      throw new LeaseConfigError(messages.joinResultsMissing(leaseObjectNames(this.options).result, statement));
    }
    const { role, allowed } = await this.store.schema.mayCreateSchema();
    if (!allowed) throw new LeaseConfigError(messages.createSchemaNotAllowed(role, this.options.schema));
    await this.store.schema.createJoinResults();
  }

  /** The preemption column came with a later migration: the same rule as the join result table's. */
  private async checkPreemption(): Promise<void> {
    if (!(await this.store.schema.preemptionMissing())) return;
    if (!this.options.createSchema) {
      const [statement] = preemptionStatements(this.options);
      const table = leaseObjectNames(this.options).lease;
      throw new LeaseConfigError(messages.preemptionMissing(table, preemptionMigrationName(this.options), statement));
    }
    const { role, allowed } = await this.store.schema.mayCreateSchema();
    if (!allowed) throw new LeaseConfigError(messages.createSchemaNotAllowed(role, this.options.schema));
    await this.store.schema.createPreemption();
  }

  /**
   * Which history probe the server allows: the WAL timeline, or (EXECUTE on the WAL functions revoked, or refused as
   * on Aurora) a fixed timeline, said once here. See the README's "Failover" section for what holds where.
   */
  private async probeTimeline(): Promise<void> {
    const fixed = await this.store.probeTimeline();
    if (fixed === null) return;
    this.logger.warn(
      'pg_current_wal_lsn()/pg_walfile_name() are not executable here (a managed server such as Aurora, or EXECUTE ' +
        `revoked): the timeline guard is off, fencing tokens carry the fixed timeline ${fixed} (the largest in the ` +
        'tables) and rise within this server; leases still end when the system identifier changes where it is ' +
        'readable. Safe where replication is synchronous or at the storage layer (Aurora); see the README ' +
        '"Failover" section',
    );
  }

  /** A role missing a right would fail later, statement by statement: name every missing right at bootstrap. */
  private async checkPrivileges(): Promise<void> {
    const { role, missing } = await this.store.schema.missingPrivileges();
    if (missing.length === 0) return;
    throw new LeaseConfigError(
      messages.privilegesMissing(role, missing.join(', '), grantStatements(this.options, role).join('; ')),
    );
  }
}
