/**
 * The statements of the waiters' line (docs/waiting.md; SQL in `sql/waiters.sql.ts` and `sql/handoff.sql.ts`): a
 * waiter queues, renews its row on the waiter heartbeat's own connection, leaves, and confirms a grant a release
 * handed it. On the statement pool, bounded like a read, the enqueue by the waiter's own bound.
 */
import type pg from 'pg';
import { type BoundedStatement, retryingSerializationFailures } from '../database/sessions.js';
import { exhausted } from '../errors/database-errors.js';
import type { EngineSettings } from '../options/engine-settings.js';
import { type DequeueAllRow, dequeueAllTaken } from './rows.js';
import type { RunStatement } from './schema-store.js';
import type { StatementTexts } from './statement-texts.js';
import type { AcquiredRow, ParkedRelease, ParkRequest, WaiterPlace } from './store.types.js';
import { lockWaitMs } from './lone-store.js';

/** What the line needs of the lease store it belongs to. */
export interface WaiterLine {
  /** The head-only channel when NOTIFY is on, else null. */
  readonly notifyChannel: () => string | null;
  /** How an acquisition statement is bounded (a confirmation starts a lease like one). */
  readonly acquireBounds: () => { boundMs: number; slackMs: number };
  /** The single release statement: passes on a grant a leaving waiter was handed meanwhile. */
  readonly release: (targetKey: string, leaseToken: string) => Promise<boolean>;
  /** The waiter sequence's quoted name (for the error of an exhausted sequence). */
  readonly waiterSequence: string;
}

export class WaiterStore {
  constructor(
    private readonly run: RunStatement,
    /** A statement on the waiter heartbeat's own connection (a slow renewal never delays a lease renewal). */
    private readonly runOnHeartbeat: <R extends pg.QueryResultRow>(
      statement: BoundedStatement,
    ) => Promise<{ rows: R[]; sentAt: number }>,
    /** The statement texts in use (rebuilt when the timeline is fixed at bootstrap). */
    private readonly sql: () => StatementTexts,
    private readonly options: EngineSettings,
    private readonly named: (statement: string) => { name?: string },
    private readonly line: WaiterLine,
  ) {}

  /**
   * The single release (see `LeaseStore.release`), which also queues `park` for this process when it hands the key to
   * a waiter (`parkingReleaseSql`): the re-queue of a caller about to ask again, in the release's own commit. Never
   * batched; waits for a locked row within its bound, as the single release does.
   */
  async releaseAndPark(
    targetKey: string,
    leaseToken: string,
    timeoutMs: number,
    park: ParkRequest,
  ): Promise<ParkedRelease> {
    const { options } = this;
    const { rows } = await retryingSerializationFailures(() =>
      this.run<{ released: boolean; parked_seq: string | null; parked_at: Date | null }>({
        ...this.named('release_and_park'),
        boundMs: timeoutMs,
        text: this.sql().releaseAndPark,
        values: [
          targetKey,
          leaseToken,
          this.line.notifyChannel(),
          options.asyncReleaseCommits,
          options.agingIntervalMs,
          lockWaitMs(timeoutMs),
          park.waiterId,
          options.owner,
          park.priority,
          options.waiterTimeoutMs,
          options.maxWaitersPerTarget,
        ],
      }),
    ).catch((error: unknown) => {
      throw exhausted(error, 'seq', this.line.waiterSequence) ?? error;
    });
    const row = rows[0];
    const place = row?.parked_seq ? { seq: BigInt(row.parked_seq), queuedAt: row.parked_at! } : null;
    return { released: row?.released === true, place };
  }

  /**
   * Queues a waiter, or refreshes it when it is already queued. `place` re-queues an evicted waiter at its old place.
   * Returns null when the target already has `maxWaitersPerTarget` live waiters.
   *
   * One statement. Its row is born with `timeoutMs` to live, counted from when the statement reached the server
   * (`statement_timestamp()`), and the client gives up on it after `timeoutMs`: a row that lands after its caller gave
   * up on it (a statement stalled in the server) is dead on arrival, so it never blocks the line. A wait that gives up
   * while its enqueue is in flight removes the row once the statement has landed (see `WaitQueue`).
   */
  async enqueue(
    targetKey: string,
    waiterId: string,
    priority: number,
    place: WaiterPlace | undefined,
    timeoutMs: number,
  ): Promise<WaiterPlace | null> {
    const { waiterSequence } = this.line;
    const bound = Math.max(1, Math.min(Math.floor(timeoutMs), this.options.waiterTimeoutMs));
    const { rows } = await this.run<{ seq: string; queued_at: Date }>({
      ...this.named('enqueue'),
      boundMs: bound,
      text: this.sql().enqueue,
      values: [
        targetKey,
        waiterId,
        this.options.owner,
        priority,
        this.options.waiterTimeoutMs,
        place?.queuedAt ?? null,
        place ? place.seq.toString() : null,
        this.options.maxWaitersPerTarget,
        bound,
      ],
    }).catch((error: unknown) => {
      throw exhausted(error, 'seq', waiterSequence) ?? error;
    });
    const row = rows[0];
    return row ? { seq: BigInt(row.seq), queuedAt: row.queued_at } : null;
  }

  /**
   * Renews this process's waiters in one statement and removes dead waiters (not ours) of the same targets, waking
   * the targets whose line moved, and names (NOTIFY) each of ours that heads the line of a key left free (see
   * `renewWaitersSql`). Returns the waiter ids still queued.
   */
  async renew(targetKeys: string[], waiterIds: string[], timeoutMs: number): Promise<Set<string>> {
    const { rows } = await this.runOnHeartbeat<{ waiter_id: string | null }>({
      ...this.named('renew_waiters'),
      boundMs: timeoutMs,
      customPlans: true,
      text: this.sql().renewWaiters,
      values: [targetKeys, waiterIds, this.line.notifyChannel(), this.options.agingIntervalMs],
    });
    return new Set(rows.flatMap((row) => (row.waiter_id ? [row.waiter_id] : [])));
  }

  /**
   * Removes a waiter that gives up, passing on a grant it was handed (see `dequeueSql`); wakes the next waiter when
   * the target is free. A grant committed while the statement waited for the waiter's row is passed on by a release.
   */
  async dequeue(targetKey: string, waiterId: string): Promise<void> {
    const { rows } = await retryingSerializationFailures(() =>
      this.run<{ row_taken: boolean }>({
        ...this.named('dequeue'),
        text: this.sql().dequeue,
        values: [targetKey, waiterId, this.line.notifyChannel(), this.options.agingIntervalMs],
      }),
    );
    if (rows[0]?.row_taken) await this.line.release(targetKey, waiterId);
  }

  /** Removes the given waiters (shutdown), passing on grants they never confirmed. */
  async dequeueAll(waiters: ReadonlyArray<{ targetKey: string; id: string }>): Promise<void> {
    if (waiters.length === 0) return;
    const values = [waiters.map((w) => w.targetKey), waiters.map((w) => w.id), this.line.notifyChannel()];
    const { rows } = await this.run<DequeueAllRow>({
      text: this.sql().dequeueAll,
      values: [...values, this.options.agingIntervalMs],
    });
    // Rows a release took with a grant committed meanwhile (see `dequeue`): passed on by a release each.
    const granted = dequeueAllTaken(rows);
    await Promise.all(granted.map((w) => this.line.release(w.targetKey, w.waiterId)));
  }

  /**
   * A waiter confirms a grant a release handed it (see `confirmGrantSql`), with its call's lease length (absent: the
   * module's); null: it was passed on meanwhile.
   */
  async confirmGrant(
    targetKey: string,
    waiterId: string,
    holdMs: number,
    leaseTimeoutMs = this.options.leaseTimeoutMs,
  ): Promise<AcquiredRow | null> {
    const { rows, sentAt } = await this.run<{ fencing_token: string }>({
      ...this.named('confirm_grant'),
      ...this.line.acquireBounds(),
      text: this.sql().confirmGrant,
      values: [targetKey, waiterId, leaseTimeoutMs, holdMs],
    });
    const row = rows[0];
    return row ? { fencingToken: BigInt(row.fencing_token), sentAt, tookOver: false, previousOwner: null } : null;
  }
}
