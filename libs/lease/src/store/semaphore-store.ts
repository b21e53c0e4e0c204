/**
 * The statements of semaphores (`limit` above 1): a slot's acquisition and release (see sql/semaphore.sql.ts). Run
 * like every statement of `LeaseStore`: on the statement pool, bounded, hot ones prepared once per connection; a
 * newcomer's slot acquisitions and a semaphore's releases batched by group commit, like a single holder's (see
 * `tryAcquire` and `release`).
 */
import { LeaseConfigError } from '../errors/lease.errors.js';
import { exhausted, isStatementError, readOnly } from '../errors/database-errors.js';
import { messages } from '../errors/lease.messages.js';
import type { EngineSettings } from '../options/engine-settings.js';
import { retryingSerializationFailures } from '../database/sessions.js';
import { EXCLUSIVE_LIMIT, MAX_READERS, SHARED_LIMIT } from '../options/slot-limits.js';
import { GroupCommit, type GroupCommitOptions, type ItemOutcome } from './group-commit.js';
import {
  acquireParameters,
  releaseBatchOutcomes,
  slotBatchItems,
  slotBatchOutcomes,
  type SlotBatchRow,
} from './rows.js';
import type { RunStatement } from './schema-store.js';
import type { LeaseObjectNames } from './sql/fragments.js';
import type { StatementTexts } from './statement-texts.js';
import type { AcquiredSlot, AcquireRequest, RowRef, SlotRefusal } from './store.types.js';

export type { AcquiredSlot, SlotRefusal } from './store.types.js';

interface SemaphoreRow {
  slot: number | null;
  fencing_token: string | null;
  took_over: boolean | null;
  previous_owner: string | null;
  hold_left_ms: number | null;
  held_limit: number | null;
  raced: boolean | null;
}

/**
 * How many times an attempt that lost its slot to a concurrent acquisition (`raced`) is sent again: each loss means
 * another caller took a slot (or, on a read-write key, another grant changed it since the statement's snapshot), so
 * a few suffice for callers arriving together; past them the caller hears busy.
 */
const RACED_ATTEMPTS = 4;
/** A read-write key's readers all write its writer's row, one after another: more of them may arrive together. */
const READ_WRITE_RACED_ATTEMPTS = 8;

/** One caller of a slot batch: its request and the limit it asks. */
interface SlotItem {
  readonly request: AcquireRequest;
  readonly limit: number;
}

/** One caller of a slot release batch. */
interface SlotReleaseItem {
  readonly row: RowRef;
  readonly leaseToken: string;
  readonly timeoutMs: number;
}

export class SemaphoreStore {
  /** Group commit of newcomers' slot acquisitions (see `tryAcquire`) and of semaphores' releases (see `release`). */
  private readonly acquisitions: GroupCommit<SlotItem, AcquiredSlot | SlotRefusal | 'raced'>;
  private readonly releases: GroupCommit<SlotReleaseItem, boolean | 'retry'>;

  constructor(
    private readonly run: RunStatement,
    private readonly sql: () => StatementTexts,
    private readonly names: LeaseObjectNames,
    private readonly options: EngineSettings,
    private readonly named: (statement: string) => { name?: string },
    private readonly bounds: () => { boundMs: number; slackMs: number },
    private readonly notifyChannel: () => string | null,
    batching: Omit<GroupCommitOptions, 'splittable'>,
  ) {
    this.acquisitions = new GroupCommit((items) => this.sendAcquisitions(items), {
      ...batching,
      splittable: isStatementError,
    });
    this.releases = new GroupCommit((items) => this.sendReleases(items), { ...batching, splittable: isStatementError });
  }

  /** Batches sent so far and their sizes (tests, benchmarks). */
  get batchStats() {
    return { acquire: { ...this.acquisitions.stats }, release: { ...this.releases.stats } };
  }

  /**
   * One statement (`semaphoreAcquireSql`): the lowest free slot of `request.targetKey` under `limit`, or a refusal —
   * the slots are taken, as many live waiters are ahead as slots are free, or another limit holds the key. Bounded
   * like a single holder's acquisition.
   *
   * A newcomer's attempt on a semaphore goes through group commit: the attempts made in one turn of the event loop go
   * in one statement and one commit (`semaphoreBatchAcquireSql`, the same rules). A waiter's attempt, a read-write
   * key's (`limit` 0 or -1) and every attempt with `maxBatchSize` 1 go alone, as does an attempt sent again after it
   * lost its slot to a concurrent acquisition (`raced`).
   */
  async tryAcquire(
    request: AcquireRequest,
    limit: number,
    onBatch?: (size: number) => void,
  ): Promise<AcquiredSlot | SlotRefusal> {
    const batched =
      limit > 1 && this.options.maxBatchSize > 1 && request.waiterId === undefined && request.queueAs === undefined;
    if (!batched) onBatch?.(1);
    for (let attempt = 1; ; attempt++) {
      const outcome =
        batched && attempt === 1
          ? await this.acquisitions.submit({ request, limit }, onBatch)
          : await this.acquireOnce(request, limit);
      if (outcome !== 'raced') return outcome;
      if (attempt >= (limit > 0 ? RACED_ATTEMPTS : READ_WRITE_RACED_ATTEMPTS))
        return { refused: true, holdLeftMs: null, heldLimit: null };
    }
  }

  /**
   * One batch of slot acquisitions: a lone caller sends the single statement; several the set-based one. Errors as
   * the single statement's (a statement error splits the batch, see GroupCommit).
   */
  private async sendAcquisitions(items: SlotItem[]): Promise<Array<ItemOutcome<AcquiredSlot | SlotRefusal | 'raced'>>> {
    if (items.length === 1) return [{ ok: true, value: await this.acquireOnce(items[0].request, items[0].limit) }];
    const { rows, sentAt } = await this.run<SlotBatchRow>({
      ...this.named('semaphore_acquire_batch'),
      ...this.bounds(),
      text: this.sql().semaphoreBatchAcquire,
      values: [
        JSON.stringify(slotBatchItems(items)),
        this.options.owner,
        this.options.leaseTimeoutMs,
        this.options.agingIntervalMs,
      ],
    }).catch((error: unknown) => {
      throw this.mapped(error, items[0].request.targetKey);
    });
    return slotBatchOutcomes(items.length, rows, sentAt);
  }

  private async acquireOnce(request: AcquireRequest, limit: number): Promise<AcquiredSlot | SlotRefusal | 'raced'> {
    const { rows, sentAt } = await retryingSerializationFailures(() =>
      this.run<SemaphoreRow>({ ...this.statementOf(limit), ...this.bounds(), values: this.valuesOf(request, limit) }),
    ).catch((error: unknown) => {
      throw this.mapped(error, request.targetKey);
    });
    const row = rows[0];
    if (!row || row.fencing_token === null || row.slot === null) {
      if (row?.raced) return 'raced';
      return { refused: true, holdLeftMs: row?.hold_left_ms ?? null, heldLimit: row?.held_limit ?? null };
    }
    return {
      rowSlot: row.slot,
      fencingToken: BigInt(row.fencing_token),
      sentAt,
      tookOver: row.took_over === true,
      previousOwner: row.previous_owner,
    };
  }

  /** An acquisition's error as the caller hears it: the library's error for a known cause, else the driver's. */
  private mapped(error: unknown, targetKey: string): unknown {
    return (
      unmigrated(error, this.options.tableName) ??
      exhausted(error, 'fencing_token', this.names.fencingSequence) ??
      readOnly(error, targetKey) ??
      error
    );
  }

  /** A semaphore's statement, or a read-write lease's (`limit` 0: a reader's, -1: a writer's; docs/read-write.md). */
  private statementOf(limit: number): { name?: string; text: string } {
    const sql = this.sql();
    if (limit === SHARED_LIMIT) return { ...this.named('shared_acquire'), text: sql.sharedAcquire };
    if (limit === EXCLUSIVE_LIMIT) return { ...this.named('exclusive_acquire'), text: sql.exclusiveAcquire };
    return { ...this.named('semaphore_acquire'), text: sql.semaphoreAcquire };
  }

  private valuesOf(request: AcquireRequest, limit: number): unknown[] {
    const values = acquireParameters(request, this.options);
    if (limit === SHARED_LIMIT) return [...values, this.notifyChannel(), MAX_READERS];
    return limit === EXCLUSIVE_LIMIT ? values : [...values, limit];
  }

  /**
   * Token-guarded soft release of a slot row, as `LeaseStore.release` (which sends slot rows here), waking as many of
   * the key's waiters as slots are free. Whether our lease was released. A semaphore's slot (`row.semaphore`) goes
   * through group commit (`semaphoreBatchReleaseSql`, the same rules); a read-write lease's row, and every release
   * with `maxBatchSize` 1, alone — as does a slot whose row the batch found locked (a fenced write still finishing):
   * the single statement waits for it.
   */
  async release(row: RowRef, leaseToken: string, timeoutMs: number): Promise<boolean> {
    if (row.semaphore !== true || this.options.maxBatchSize === 1) return this.releaseOnce(row, leaseToken, timeoutMs);
    const outcome = await this.releases.submit({ row, leaseToken, timeoutMs });
    return outcome === 'retry' ? this.releaseOnce(row, leaseToken, timeoutMs) : outcome;
  }

  private async sendReleases(items: SlotReleaseItem[]): Promise<Array<ItemOutcome<boolean | 'retry'>>> {
    if (items.length === 1) {
      const [{ row, leaseToken, timeoutMs }] = items as [SlotReleaseItem];
      return [{ ok: true, value: await this.releaseOnce(row, leaseToken, timeoutMs) }];
    }
    const batch = items.map(({ row, leaseToken }, index) => ({
      i: index + 1,
      target_id: row.targetKey,
      slot: row.slot,
      lease_token: leaseToken,
    }));
    const { asyncReleaseCommits, agingIntervalMs } = this.options;
    const { rows } = await retryingSerializationFailures(() =>
      this.run<{ i: number; outcome: 'released' | 'gone' | 'retry' }>({
        ...this.named('semaphore_release_batch'),
        boundMs: Math.min(...items.map((item) => item.timeoutMs)),
        text: this.sql().semaphoreBatchRelease,
        values: [JSON.stringify(batch), this.notifyChannel(), asyncReleaseCommits, agingIntervalMs],
      }),
    );
    return releaseBatchOutcomes(items.length, rows);
  }

  /** The single release statement of a slot: waits for a locked row, within its bound. */
  private async releaseOnce(row: RowRef, leaseToken: string, timeoutMs: number): Promise<boolean> {
    const { rows } = await retryingSerializationFailures(() =>
      this.run<{ released: boolean }>({
        ...this.named('semaphore_release'),
        boundMs: timeoutMs,
        text: this.sql().semaphoreRelease,
        values: this.releaseValues(row, leaseToken, this.options.asyncReleaseCommits, timeoutMs),
      }),
    );
    return rows[0]?.released === true;
  }

  /** The parameters of the release statement (also sent by a fenced transaction's release, see `FenceStore`). */
  releaseValues(row: RowRef, leaseToken: string, asyncCommit: boolean, lockWaitMs: number): unknown[] {
    return [
      row.targetKey,
      leaseToken,
      this.notifyChannel(),
      asyncCommit,
      this.options.agingIntervalMs,
      String(Math.max(1, Math.floor(lockWaitMs))),
      row.slot,
    ];
  }
}

/** The slot_limit column is missing: the database has not run the migration that adds it. */
function unmigrated(error: unknown, tableName: string): LeaseConfigError | undefined {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  if (code !== '42703' || typeof message !== 'string' || !message.includes('slot_limit')) return undefined;
  return new LeaseConfigError(messages.slotLimitUnmigrated(tableName), { cause: error });
}
