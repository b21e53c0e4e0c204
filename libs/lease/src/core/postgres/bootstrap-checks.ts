/**
 * What the engine checks at bootstrap, before the first lease: the DataSource, the tables (created when
 * `createSchema` is set and some are missing), the role's rights, and the system identifier the leases are acquired
 * under. Collaborators given explicitly.
 */
import type { Logger } from '@nestjs/common';
import type { LeaseDatabase } from '../../database/lease-database.js';
import { LeaseConfigError } from '../../errors/lease.errors.js';
import type { EngineSettings } from '../../options/engine-settings.js';
import {
  grantStatements,
  joinResultStatements,
  leaseObjectNames,
  preemptionStatements,
  schemaStatements,
  slotColumnStatements,
  tokenLayoutStatement,
} from '../../schema/lease-schema.js';
import {
  preemptionMigrationName,
  slotColumnMigrationName,
  tokenLayoutMigrationName,
} from '../../schema/migration-names.js';
import type { LeaseStore } from '../../store/lease-store.js';
import type { SequenceRaise, TokenStanding } from '../../store/server-history.js';
import { ownerRaiseSql } from '../../store/sql/token-floor.sql.js';
import { messages } from '../../errors/lease.messages.js';

export class BootstrapChecks {
  /** A settle after a renewal found another system, in flight (see `settleAgain`). */
  private settling?: Promise<void>;

  constructor(
    private readonly database: LeaseDatabase,
    private readonly store: LeaseStore,
    private readonly options: EngineSettings,
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
    await this.checkColumn('preempt_of');
    await this.checkColumn('slot');
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

  /**
   * The preemption column and the slot column came with later migrations: the same rule as the join result table's.
   * (Without the slot column the library's statements cannot run; a table from before it must be converted first.)
   */
  private async checkColumn(column: 'preempt_of' | 'slot'): Promise<void> {
    if (!(await this.store.schema.columnMissing(column))) return;
    if (!this.options.createSchema) {
      const table = leaseObjectNames(this.options).lease;
      throw new LeaseConfigError(
        column === 'slot'
          ? messages.slotColumnMissing(
              table,
              slotColumnMigrationName(this.options),
              slotColumnStatements(this.options)[0],
            )
          : messages.preemptionMissing(
              table,
              preemptionMigrationName(this.options),
              preemptionStatements(this.options)[0],
            ),
      );
    }
    const { role, allowed } = await this.store.schema.mayCreateSchema();
    if (!allowed) throw new LeaseConfigError(messages.createSchemaNotAllowed(role, this.options.schema));
    await this.store.schema.createColumn(column);
  }

  /**
   * Where new tokens stand (`LeaseStore.probeTimeline`): the WAL timeline, or a fixed one (EXECUTE on the WAL functions
   * revoked, or refused as on Aurora; or tables holding tokens of a later timeline than the server's), said once here;
   * and the sequences, raised above the tables where they stood behind (a new server: a blue/green switchover, a
   * restore). A sequence that must be raised and cannot (the role lacks UPDATE on it) fails the bootstrap with what to
   * run. See docs/failover.md for what holds where.
   */
  private async probeTimeline(): Promise<void> {
    const standing = await this.store.probeTimeline();
    this.describe(standing);
    const refused = standing.raises.filter((raise) => raise.raisedTo === null);
    if (refused.length > 0) throw new LeaseConfigError(this.raiseRefused(refused));
  }

  /**
   * A renewal found another system identifier (a switchover to another database cluster, without a restart): where
   * new tokens stand is settled again, as at bootstrap. Never rejects (a background step): a failure is logged, and
   * until a settle succeeds each key's grants still rise above its own earlier ones (the grant's floor).
   */
  settleAgain(): Promise<void> {
    this.settling ??= this.store
      .probeTimeline()
      .then((standing) => {
        this.describe(standing);
        const refused = standing.raises.filter((raise) => raise.raisedTo === null);
        if (refused.length > 0) this.logger.error(this.raiseRefused(refused));
      })
      .catch((error: unknown) => {
        this.logger.error(`Settling the fencing sequences on the new server failed: ${String(error)}`);
      })
      .finally(() => (this.settling = undefined));
    return this.settling;
  }

  /** One line per fact worth an operator's attention: a fixed timeline, a sequence raised. */
  private describe(standing: TokenStanding): void {
    if (standing.fixed !== null && standing.reason === 'wal') {
      this.logger.warn(
        'pg_current_wal_lsn()/pg_walfile_name() are not executable here (a managed server such as Aurora, or EXECUTE ' +
          `revoked): the timeline guard is off, fencing tokens carry the fixed timeline ${standing.fixed} (the ` +
          'largest in the tables) and rise within this server; leases still end when the system identifier changes ' +
          'where it is readable. Safe where replication is synchronous or at the storage layer (Aurora); see the ' +
          'docs/failover.md',
      );
    } else if (standing.fixed !== null) {
      this.logger.warn(
        `The lease tables hold fencing tokens of timeline ${standing.fixed}, later than this server's ` +
          `(${standing.serverTimeline}): they were copied or restored from a server with a longer history (a ` +
          'blue/green switchover, a restore into a new cluster). Fencing tokens carry the fixed timeline ' +
          `${standing.fixed} so they stay above them; the timeline guard is off while this server's timeline is ` +
          'below it. See the docs/failover.md',
      );
    }
    for (const raise of standing.raises) {
      if (raise.raisedTo === null) continue;
      this.logger.warn(
        `The ${raise.kind} sequence ${raise.sequence} stood at ${raise.stood ?? 'its start'}, not above the ` +
          `${raise.above} in the lease tables (a new server: a blue/green switchover, a restore): raised to ` +
          `${raise.raisedTo}, so new ${raise.kind === 'fencing' ? 'tokens' : 'places'} are above every one there`,
      );
    }
  }

  /** What to run when sequences must be raised and the role may not (`setval` needs UPDATE on the sequence). */
  private raiseRefused(refused: readonly SequenceRaise[]): string {
    const n = leaseObjectNames(this.options);
    const statements = refused.map((raise) => ownerRaiseSql(n, raise.kind));
    const sequences = refused.map((raise) => raise.sequence).join(', ');
    return (
      `The lease sequences ${sequences} stand below the values in the lease tables (a new server: a blue/green ` +
      'switchover by logical replication, a restore), and the database role may not raise them (setval needs ' +
      `UPDATE on the sequence): new fencing tokens could be smaller than tokens already handed out. As the owner ` +
      `of the lease tables, with no process granting leases on this server, run: ${statements.join('; ')}; or ` +
      `GRANT UPDATE ON SEQUENCE ${sequences} TO the application's role. See the docs/failover.md`
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
