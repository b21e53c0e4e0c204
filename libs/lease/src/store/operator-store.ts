/**
 * The operator's statements on the statement pool (docs/console.md): force-release, drains, the audit
 * trail, the journal. Each one statement, bounded like a release or a read; a missing operator table (the second
 * migration not run) is a `LeaseConfigError` that says so.
 */
import type pg from 'pg';
import { LeaseConfigError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { EngineSettings } from '../options/engine-settings.js';
import type { DrainEntry, OperatorAuditEntry, TimelineEntry } from '../interfaces/lease-operator.interface.js';
import {
  type BoundedStatement,
  type PoolLike,
  runStatement,
  type SessionSource,
  sessionsOf,
} from '../database/sessions.js';
import { shortBoundMs } from '../options/bounds.js';
import { leaseObjectNames } from '../schema/lease-schema.js';
import {
  auditSql,
  drainSql,
  drainsSql,
  forceReleaseSql,
  historySql,
  journalInsertSql,
  journalTrimSql,
  undrainSql,
} from './sql/operator.sql.js';

/** One journal row to write (see `LeaseJournal`). */
export interface JournalRow {
  readonly at: Date;
  readonly targetKey: string;
  readonly keyTemplate: string;
  readonly type: string;
  readonly owner: string;
  readonly fencingToken: bigint | null;
  readonly detail: string | null;
}

const UNDEFINED_TABLE = '42P01';
const INSUFFICIENT_PRIVILEGE = '42501';

export class OperatorStore {
  private readonly sql;
  private readonly db: SessionSource;

  constructor(
    db: SessionSource | PoolLike,
    private readonly options: EngineSettings,
  ) {
    this.db = sessionsOf(db);
    const n = leaseObjectNames(options);
    this.sql = {
      forceRelease: forceReleaseSql(n),
      drain: drainSql(n),
      undrain: undrainSql(n),
      drains: drainsSql(n),
      audit: auditSql(n),
      journal: journalInsertSql(n),
      trim: journalTrimSql(n),
      history: historySql(n),
      table: n.audit,
    };
  }

  async forceRelease(
    targetKey: string,
    actor: string,
    reason: string,
  ): Promise<{ released: boolean; holder: string | null; fencingToken: bigint | null; live: boolean; at: Date }> {
    const [row] = await this.run<{
      owner: string | null;
      fencing_token: string | null;
      live: boolean | null;
      at: Date;
    }>(this.sql.forceRelease, [targetKey, actor, reason]);
    return {
      released: row.fencing_token !== null,
      holder: row.owner,
      fencingToken: row.fencing_token === null ? null : BigInt(row.fencing_token),
      live: row.live === true,
      at: row.at,
    };
  }

  async drain(kind: DrainEntry['kind'], subject: string, actor: string, reason: string): Promise<Date> {
    const [row] = await this.run<{ at: Date }>(this.sql.drain, [kind, subject, actor, reason]);
    return row.at;
  }

  async undrain(kind: DrainEntry['kind'], subject: string, actor: string, reason: string): Promise<boolean> {
    const [row] = await this.run<{ removed: number }>(this.sql.undrain, [kind, subject, actor, reason]);
    return row.removed > 0;
  }

  drains(): Promise<DrainEntry[]> {
    return this.run<DrainEntry & pg.QueryResultRow>(this.sql.drains);
  }

  async audit(limit: number): Promise<OperatorAuditEntry[]> {
    const rows = await this.run<{
      id: string;
      at: Date;
      action: OperatorAuditEntry['action'];
      kind: DrainEntry['kind'];
      subject: string;
      actor: string;
      reason: string;
      fencing_token: string | null;
      holder: string | null;
    }>(this.sql.audit, [limit]);
    return rows.map((row) => ({
      id: row.id,
      at: row.at,
      action: row.action,
      kind: row.kind,
      subject: row.subject,
      actor: row.actor,
      reason: row.reason,
      fencingToken: row.fencing_token === null ? undefined : BigInt(row.fencing_token),
      holder: row.holder ?? undefined,
    }));
  }

  async history(targetKey: string, limit: number): Promise<TimelineEntry[]> {
    const rows = await this.run<{
      at: Date;
      type: string;
      owner: string;
      fencing_token: string | null;
      detail: string | null;
    }>(this.sql.history, [targetKey, limit]);
    return rows.map((row) => ({
      at: row.at,
      type: row.type as TimelineEntry['type'],
      owner: row.owner,
      fencingToken: row.fencing_token === null ? undefined : BigInt(row.fencing_token),
      detail: row.detail ?? undefined,
    }));
  }

  async writeJournal(rows: readonly JournalRow[]): Promise<void> {
    await this.run(this.sql.journal, [
      rows.map((row) => row.at),
      rows.map((row) => row.targetKey),
      rows.map((row) => row.keyTemplate),
      rows.map((row) => row.type),
      rows.map((row) => row.owner),
      rows.map((row) => (row.fencingToken === null ? null : String(row.fencingToken))),
      rows.map((row) => row.detail),
    ]);
  }

  async trimJournal(retentionMs: number, batch: number): Promise<number> {
    const [row] = await this.run<{ trimmed: number }>(this.sql.trim, [retentionMs, batch]);
    return row.trimmed;
  }

  /** Whether an error is the operator's tables missing or out of the role's rights (said once, not every refresh). */
  static missingTable(error: unknown): boolean {
    return error instanceof LeaseConfigError && error.message.startsWith("The operator's tables are");
  }

  private async run<R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<R[]> {
    const statement: BoundedStatement = { text, values, boundMs: shortBoundMs(this.options) };
    try {
      return (await runStatement<R>(this.db, statement)).rows;
    } catch (error) {
      if ((error as { code?: string }).code === UNDEFINED_TABLE) {
        throw new LeaseConfigError(messages.operatorTablesMissing(this.sql.table), { cause: error });
      }
      if ((error as { code?: string }).code === INSUFFICIENT_PRIVILEGE) {
        throw new LeaseConfigError(messages.operatorRightsMissing(String((error as Error).message)), { cause: error });
      }
      throw error;
    }
  }
}
