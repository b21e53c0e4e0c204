/**
 * The statements of a fenced transaction, sent on the transaction's own connection (the caller's manager), never on
 * the statement pool: the lock that opens it, and the release that may close it (`fenced(work, { release: true })`).
 */
import type { EntityManager, QueryRunner } from 'typeorm';
import { readOnly } from '../errors/database-errors.js';
import type { EngineSettings } from '../options/engine-settings.js';
import type { StatementTexts } from './statement-texts.js';
import type { SemaphoreStore } from './semaphore-store.js';
import type { RowRef } from './store.types.js';

export class FenceStore {
  constructor(
    private readonly sql: () => StatementTexts,
    private readonly options: EngineSettings,
    private readonly notifyChannel: () => string | null,
    private readonly slots?: SemaphoreStore,
  ) {}

  /**
   * First statement of a fenced transaction: locks the lease row and reads its token, and the server's timeline (a
   * lease of another timeline must not write: see `renew`). It bounds how long the row lock may be waited for
   * (`lockWaitMs`: the time left before the lease's local deadline) and how long the transaction may sit idle, so a
   * holder paused inside it cannot block a takeover for ever; it makes the transaction's commit durable whatever the
   * role's default. On a server in recovery: `LeaseUnavailableError`. `forced`: the row was released by an operator
   * (`LeaseOperator.forceRelease`), so a lease whose token is gone lost it that way. `preemptOf`: the lease token a
   * preempting caller asked to stop (docs/preemption.md); a lease it names is lost, its token still there or not.
   */
  async lockForFence(
    manager: EntityManager | QueryRunner,
    row: RowRef,
    lockWaitMs: number,
  ): Promise<{ leaseToken: string | null; timeline: bigint; forced: boolean; preemptOf: string | null }> {
    let rows: Array<{ lease_token: string | null; timeline: string; forced: boolean; preempt_of: string | null }>;
    try {
      rows = await manager.query(this.sql().lockForFence, [
        row.targetKey,
        String(this.options.fencedIdleTimeoutMs),
        String(Math.max(1, Math.ceil(lockWaitMs))),
        row.slot,
      ]);
    } catch (error) {
      throw readOnly(error, row.targetKey) ?? error;
    }
    const [locked] = rows;
    return {
      leaseToken: locked?.lease_token ?? null,
      timeline: BigInt(locked.timeline),
      forced: locked.forced,
      preemptOf: locked.preempt_of ?? null,
    };
  }

  /**
   * The release statement as the last statement of a fenced transaction whose row lock it already holds: the row is
   * released (and the head of its line notified) by the transaction's own COMMIT, with the work's writes. Never with
   * `asyncReleaseCommits`: that would make the work's commit non-durable too. Whether the row was released (false
   * only when its token is not this lease's, which the lock step already ruled out).
   */
  async releaseWithin(manager: EntityManager, row: RowRef, leaseToken: string): Promise<boolean> {
    if (this.slots && row.slot > 0) {
      // A semaphore's slot: its release wakes the key's line (the row lock is ours: the bound is never waited on).
      const values = this.slots.releaseValues(row, leaseToken, false, this.options.leaseTimeoutMs);
      const released: Array<{ released: boolean }> = await manager.query(this.sql().semaphoreRelease, values);
      return released[0]?.released === true;
    }
    const rows: Array<{ released: boolean }> = await manager.query(this.sql().release, [
      row.targetKey,
      leaseToken,
      this.notifyChannel(),
      false,
      this.options.agingIntervalMs,
      // The row is locked by this transaction already: the lock bound is never waited on.
      String(Math.max(1, Math.floor(this.options.leaseTimeoutMs))),
    ]);
    return rows[0]?.released === true;
  }
}
