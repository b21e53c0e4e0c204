/**
 * The statements of a fenced transaction, sent on the transaction's own connection (the caller's manager), never on
 * the statement pool: the lock that opens it, and the release that may close it (`fenced(work, { release: true })`).
 * Both travel with another statement (BEGIN, COMMIT): as one exchange of prepared statements (`database/exchange.ts`)
 * where they have a name, else in one simple-query message with their values written in as literals
 * (`sql/literals.ts`; behind a transaction pooler, where a prepared statement is no client's).
 */
import type { EntityManager, QueryRunner } from 'typeorm';
import type { FenceLock } from '../core/backend.js';
import type { BoundStatement } from '../database/exchange.js';
import { readOnly } from '../errors/database-errors.js';
import type { EngineSettings } from '../options/engine-settings.js';
import { inlineParameters, type LiteralValue } from './sql/literals.js';
import type { StatementTexts } from './statement-texts.js';
import type { SemaphoreStore } from './semaphore-store.js';
import type { RowRef } from './store.types.js';

/** The row the lock step reads. */
interface LockedRow {
  lease_token: string | null;
  timeline: string;
  forced: boolean;
  preempt_of: string | null;
}

/** A statement of a fenced transaction: prepared under `name` where it has one, else sent with its values inlined. */
function bound(text: string, values: readonly LiteralValue[], named: { name?: string }): BoundStatement {
  return { text, values, ...named, inline: () => inlineParameters(text, values) };
}

export class FenceStore {
  constructor(
    private readonly sql: () => StatementTexts,
    private readonly options: EngineSettings,
    private readonly notifyChannel: () => string | null,
    private readonly slots?: SemaphoreStore,
    private readonly named: (statement: string) => { name?: string } = () => ({}),
  ) {}

  /**
   * First statement of a fenced transaction, sent with its BEGIN: locks the lease row and reads its token, and the
   * server's timeline (a lease of another timeline must not write: see `renew`). It bounds how long the row lock may be
   * waited for (`lockWaitMs`: the time left before the lease's local deadline) and how long the transaction may sit
   * idle, so a holder paused inside it cannot block a takeover for ever; it makes the transaction's commit durable
   * whatever the role's default. `forced`: the row was released by an operator (`LeaseOperator.forceRelease`), so a
   * lease whose token is gone lost it that way. `preemptOf`: the lease token a preempting caller asked to stop
   * (docs/preemption.md); a lease it names is lost, its token still there or not.
   */
  lockStatement(row: RowRef, lockWaitMs: number): BoundStatement {
    const values = [
      row.targetKey,
      String(this.options.fencedIdleTimeoutMs),
      String(Math.max(1, Math.ceil(lockWaitMs))),
      row.slot,
    ];
    return bound(this.sql().lockForFence, values, this.named('fence_lock'));
  }

  /**
   * First statement of a fenced transaction over several leases (`MultiLease.fenced()`): locks `rows` in the order
   * given (the multi-key run's global key order) and reads each one's token; bounds as `lockStatement`.
   */
  lockManyStatement(rows: readonly RowRef[], lockWaitMs: number): BoundStatement {
    const values = [
      JSON.stringify(rows.map((row) => [row.targetKey, row.slot])),
      String(this.options.fencedIdleTimeoutMs),
      String(Math.max(1, Math.ceil(lockWaitMs))),
    ];
    return bound(this.sql().lockManyForFence, values, this.named('fence_lock_many'));
  }

  /** What the lock step over several rows read: one lock per row, in the order asked. */
  lockedMany(rows: ReadonlyArray<Record<string, unknown>>): FenceLock[] {
    return rows.map((row) => this.locked([row]));
  }

  /** What the lock step read (its one row). */
  locked(rows: ReadonlyArray<Record<string, unknown>>): FenceLock {
    const locked = rows[0] as unknown as LockedRow;
    return {
      leaseToken: locked.lease_token ?? null,
      timeline: BigInt(locked.timeline),
      forced: locked.forced,
      preemptOf: locked.preempt_of ?? null,
    };
  }

  /** An error of the lock step: on a server in recovery, `LeaseUnavailableError`; anything else unchanged. */
  lockFailed(error: unknown, row: RowRef): unknown {
    return readOnly(error, row.targetKey) ?? error;
  }

  /**
   * The lock step alone, in a transaction of the caller's (`manager`'s): the statement a fenced transaction sends with
   * its BEGIN.
   */
  async lockForFence(manager: EntityManager | QueryRunner, row: RowRef, lockWaitMs: number): Promise<FenceLock> {
    try {
      const { text, values } = this.lockStatement(row, lockWaitMs);
      return this.locked(await manager.query(text, values as unknown[]));
    } catch (error) {
      throw this.lockFailed(error, row);
    }
  }

  /**
   * The release statement as the last statement of a fenced transaction whose row lock it already holds, sent with its
   * COMMIT: the row is released (and the head of its line notified) by the transaction's own COMMIT, with the work's
   * writes. Never with `asyncReleaseCommits`: that would make the work's commit non-durable too.
   */
  releaseStatement(row: RowRef, leaseToken: string): BoundStatement {
    if (this.slots && row.slot > 0) {
      // A semaphore's slot: its release wakes the key's line (the row lock is ours: the bound is never waited on).
      const values = this.slots.releaseValues(row, leaseToken, false, this.options.leaseTimeoutMs);
      return bound(this.sql().semaphoreRelease, values as LiteralValue[], this.named('fence_slot_release'));
    }
    const values = [
      row.targetKey,
      leaseToken,
      this.notifyChannel(),
      false,
      this.options.agingIntervalMs,
      // The row is locked by this transaction already: the lock bound is never waited on.
      String(Math.max(1, Math.floor(this.options.leaseTimeoutMs))),
    ];
    return bound(this.sql().release, values, this.named('fence_release'));
  }
}
