/**
 * Runs the library's statements and maps their rows: every statement through `runStatement` (bounded on the client
 * and the server; see database/sessions.ts), its text built once per store by the pure builders of `./sql/` (every
 * value a bound parameter; the only text spliced in are the schema, table and sequence names, validated by
 * `resolveLeaseOptions` and quoted once by `leaseObjectNames`), acquisitions and releases batched by group commit.
 *
 * Expiry is always judged by PostgreSQL's clock (`clock_timestamp()`), against the timeout the holder (or waiter)
 * wrote into its own row, so processes with different settings still agree on when a lease is free.
 */
import type pg from 'pg';
import { headChannelOf } from '../database/head-payload.js';
import {
  type BoundedStatement,
  type PoolLike,
  sessionsOf,
  retryingSerializationFailures,
  runStatement,
  type SessionSource,
} from '../database/sessions.js';
import { exhausted, isStatementError, readOnly, systemIdRefused } from '../errors/database-errors.js';
import { acquireBoundMs, PURGE_AFTER_MS, shortBoundMs, slackMs } from '../options/bounds.js';
import type { EngineSettings } from '../options/engine-settings.js';
import { GroupCommit, type ItemOutcome } from './group-commit.js';
import { readHistoryOn, readServerHistory, settleTokens, type TokenStanding } from './server-history.js';
import { FenceStore } from './fence-store.js';
import { PreemptStore } from './preempt-store.js';
import { lockWaitMs, LoneStore } from './lone-store.js';
import { PurgeStore } from './purge-store.js';
import { timelineOf } from './sql/fencing-token.js';
import { SchemaStore } from './schema-store.js';
import { SemaphoreStore } from './semaphore-store.js';
import { WaiterStore } from './waiter-store.js';
import type { LeaseObjectNames } from './sql/fragments.js';
import {
  acquireBatchItems,
  acquireBatchOutcomes,
  acquireOutcome,
  acquireParameters,
  type AcquireRow,
  releaseBatchOutcomes,
  renewOutcome,
  type RenewRow,
} from './rows.js';
import { buildStatements, type StatementSettings, type StatementTexts } from './statement-texts.js';
import type { StatementFaults } from './sql/statement-faults.js';
import type {
  AcquireBatchRow,
  AcquiredRow,
  AcquireRequest,
  LeaseHistory,
  Refusal,
  ReleaseItem,
  RenewedRow,
  RenewResult,
  RowRef,
  ServerHistory,
  SnapshotRow,
} from './store.types.js';
import { ONE_SECOND_MS } from '../options/limits.js';

/**
 * Batches in flight at once per kind (acquisitions, releases): one, classic group commit. Measured on the
 * benchmark's 2-CPU box (docs/performance.md): with two in flight, batches were half as large and throughput lower
 * at 16 and 64 clients (851 vs 1,236/s and 2,408 vs 3,161/s): the client, not the disk, is the bottleneck there, and
 * fewer statements win. A stalled batch stops counting after the stall bound (see GroupCommit).
 */
const BATCHES_IN_FLIGHT = 1;

/**
 * The statements, bound to one set of table names, and how each is run: every one through `runStatement` (bounded
 * on the client and the server; see sessions.ts), hot ones named so `pg` prepares them once per connection — names
 * carry a hash of the table names, so two configurations never share a prepared plan.
 */
export class LeaseStore {
  private readonly n: LeaseObjectNames;
  private sql: StatementTexts;
  private readonly lone: LoneStore;
  private readonly purges: PurgeStore;
  /** The bootstrap checks and the DDL (on the statement pool, like every other statement). */
  readonly schema: SchemaStore;
  /** The statements a fenced transaction sends on its own connection (see `FenceStore`). */
  readonly fence: FenceStore;
  /** The statements of semaphores (`limit` above 1, see `SemaphoreStore`). */
  readonly slots: SemaphoreStore;
  /** The statements of preemption (see `PreemptStore`). */
  readonly preempt: PreemptStore;
  /** The statements of the waiters' line: enqueue, renew, dequeue, confirm a handed grant. */
  readonly waiters: WaiterStore;
  /** What the statements are built for besides the names (see `buildStatements`). */
  private settings: StatementSettings;
  /** The prepared name of a hot statement (see `buildStatements`). */
  private statement: (name: string) => { name?: string };
  /** The library's statement pool (acquisitions, releases, waiter changes, reads). */
  private readonly db: SessionSource;
  private readonly heartbeatDb: SessionSource;
  private readonly waiterHeartbeatDb: SessionSource;
  /** Whether renewals read the system identifier: set by `serverHistory()`, cleared when a renewal is refused it. */
  private systemIdReadable = true;
  /** Group commit of acquisitions and of releases (see group-commit.ts); `maxBatchSize` 1 sends every call alone. */
  private readonly acquisitions: GroupCommit<AcquireRequest, AcquiredRow | Refusal | 'retry'>;
  private readonly releases: GroupCommit<ReleaseItem, boolean | 'retry'>;
  /** The bound of a release or a read (`shortBoundMs`). */
  private readonly shortBoundMs: number;
  /** How an acquisition statement is bounded (see `tryAcquire`). */
  private readonly acquireBounds: { readonly boundMs: number; readonly slackMs: number };

  /**
   * @param db the library's statement pool (a pool with `boundedMs` when its sessions are set up by
   *   `sessionSetup`; any other pool frames every statement)
   * @param heartbeatDb a connection of the lease heartbeat's own, so renewals never queue behind other statements
   *   (a pool works too: each renewal then checks out a client)
   * @param waiterHeartbeatDb the waiter heartbeat's own connection, so a slow waiter renewal never delays a lease
   *   renewal (default: heartbeatDb)
   * @param purgeAfterMs the purge bound (`PURGE_AFTER_MS`; tests give a shorter one): its acquisitions' run cap is half
   */
  constructor(
    db: SessionSource | PoolLike,
    heartbeatDb: SessionSource | PoolLike,
    private readonly options: EngineSettings,
    waiterHeartbeatDb: SessionSource | PoolLike = heartbeatDb,
    private readonly purgeAfterMs = PURGE_AFTER_MS,
  ) {
    this.db = sessionsOf(db);
    this.heartbeatDb = sessionsOf(heartbeatDb);
    this.waiterHeartbeatDb = sessionsOf(waiterHeartbeatDb);
    this.settings = { purgeAfterMs };
    const statements = buildStatements(options, this.settings);
    ({ names: this.n, sql: this.sql, named: this.statement } = statements);
    // Fixed by the options: computed once, not per statement.
    this.shortBoundMs = shortBoundMs(options);
    this.acquireBounds = { boundMs: acquireBoundMs(options), slackMs: slackMs(options) };
    this.schema = new SchemaStore((statement) => this.run(statement), statements, options);
    // A statement stalled past a heartbeat interval (a frozen server, a lost network) no longer holds back the calls
    // queued behind it: they go in a batch of their own (independence).
    const stallMs = Math.min(ONE_SECOND_MS, options.heartbeatIntervalMs);
    const batching = { maxBatch: options.maxBatchSize, maxInFlight: BATCHES_IN_FLIGHT, stallMs };
    this.slots = new SemaphoreStore(
      (statement) => this.run(statement),
      () => this.sql,
      this.n,
      options,
      (name) => this.statement(name),
      () => this.acquireBounds,
      () => this.notifyChannel,
      batching,
    );
    this.fence = new FenceStore(
      () => this.sql,
      options,
      () => this.notifyChannel,
      this.slots,
      (name) => this.statement(name),
    );
    this.preempt = new PreemptStore(
      (statement) => this.run(statement),
      () => this.sql,
      options,
      (name) => this.statement(name),
      this.n.fencingSequence,
    );
    this.lone = new LoneStore(
      (statement) => this.run(statement),
      () => this.sql,
      options,
      (name) => this.statement(name),
      () => this.acquireBounds,
      this.n.fencingSequence,
    );
    this.waiters = new WaiterStore(
      (statement) => this.run(statement),
      (statement) => runStatement(this.waiterHeartbeatDb, statement),
      () => this.sql,
      options,
      (name) => this.statement(name),
      {
        notifyChannel: () => this.notifyChannel,
        acquireBounds: () => this.acquireBounds,
        release: (targetKey, leaseToken) => this.releaseOnce(targetKey, leaseToken, shortBoundMs(this.options)),
        waiterSequence: this.n.waiterSequence,
      },
    );
    this.purges = new PurgeStore(
      (statement) => this.run(statement),
      () => this.sql,
      options,
      purgeAfterMs,
    );
    this.acquisitions = new GroupCommit((items) => this.sendAcquisitions(items), {
      ...batching,
      splittable: isStatementError,
    });
    this.releases = new GroupCommit((items) => this.sendReleases(items), { ...batching, splittable: isStatementError });
  }

  /** A statement on the statement pool, bounded by `boundMs` (default: the short bound of a release or a read). */
  private run<R extends pg.QueryResultRow>(
    statement: Omit<BoundedStatement, 'boundMs'> & { boundMs?: number },
  ): Promise<{ rows: R[]; sentAt: number }> {
    return runStatement<R>(this.db, statement, this.shortBoundMs);
  }

  get channel(): string {
    return this.n.channel;
  }

  /**
   * One statement: a read-only pre-check (a live holder, or a live waiter ahead of the caller) short-cuts it, so a
   * failed attempt on a held row takes no row lock and writes no WAL; otherwise it takes only a free (released or
   * expired) row, or inserts the key's first row. A granted waiter's row, and the target's dead waiters, are deleted
   * in the same statement.
   *
   * Fencing order: a free row is locked first, and the token drawn after the lock, i.e. after every earlier grant of
   * the key committed (that is why releases keep the row); only a key's first row draws its token before (no earlier
   * grant exists). One sequence value per grant. The token carries the server's timeline in its high bits (see
   * `historyOrdered`), so it also stays larger than every token of the history before a failover. On a server in
   * recovery the statement fails at once (`LeaseUnavailableError`).
   *
   * Bounded by `acquireBoundMs` on the server and the client (a grant later than that would be past its local
   * deadline): a statement waiting for a locked row (a fenced transaction still finishing) waits within it, and one
   * the client gave up on committed nothing.
   */
  tryAcquire(request: AcquireRequest, onBatch?: (size: number) => void): Promise<AcquiredRow | Refusal> {
    const alone = () => {
      onBatch?.(1);
      return retryingSerializationFailures(() => this.acquireOnce(request));
    };
    // A waiter's attempt goes alone: only the single statement recognises a grant handed to it (see confirmGrant).
    if (this.options.maxBatchSize === 1 || request.queueAs !== undefined || request.waiterId !== undefined) {
      return alone();
    }
    return this.acquisitions.submit(request, onBatch).then((outcome) =>
      // A row the batch could not lock at once: this caller alone goes the single statement, which waits for it.
      outcome === 'retry' ? alone() : outcome,
    );
  }

  /** Chooses whether renewals read the system identifier (a benchmark compares both; see `serverHistory`). */
  readSystemId(readable: boolean): void {
    this.systemIdReadable = readable;
  }

  /** Batches sent so far and their sizes (tests, benchmarks); `slots`: semaphores' acquisitions and releases. */
  get batchStats() {
    return {
      acquire: { ...this.acquisitions.stats },
      release: { ...this.releases.stats },
      slots: this.slots.batchStats,
    };
  }

  /**
   * One batch of acquisitions: a lone caller goes alone (`acquireOnce`: it goes at once and waits for a locked row,
   * exactly as without group commit); several send the set-based statement (`batchAcquireSql`), one commit for all.
   * The batch waits for no lock (BATCH_LOCK_WAIT_MS): one that meets one fails whole on the server, and is split.
   */
  private async sendAcquisitions(
    requests: AcquireRequest[],
  ): Promise<Array<ItemOutcome<AcquiredRow | Refusal | 'retry'>>> {
    if (requests.length === 1) {
      return [{ ok: true, value: await retryingSerializationFailures(() => this.acquireOnce(requests[0])) }];
    }
    const batch = acquireBatchItems(requests);
    const { rows, sentAt } = await this.run<AcquireBatchRow>({
      ...this.statement('acquire_batch'),
      ...this.acquireBounds,
      text: this.sql.batchAcquire,
      values: [JSON.stringify(batch), this.options.owner, this.options.leaseTimeoutMs, this.options.agingIntervalMs],
    }).catch((error: unknown) => {
      throw (
        exhausted(error, 'fencing_token', this.n.fencingSequence) ?? readOnly(error, requests[0].targetKey) ?? error
      );
    });
    return acquireBatchOutcomes(requests.length, rows, sentAt);
  }

  private async acquireOnce(request: AcquireRequest): Promise<AcquiredRow | Refusal> {
    const { queueAs } = request;
    if (queueAs === undefined && request.waiterId === undefined) {
      const lone = await this.lone.acquire(request);
      if (lone !== 'full') return lone;
    }
    const queueValues =
      queueAs === undefined ? [] : [queueAs.waiterId, this.options.waiterTimeoutMs, this.options.maxWaitersPerTarget];
    const { rows, sentAt } = await this.run<AcquireRow>({
      ...this.statement(queueAs === undefined ? 'acquire' : 'acquire_or_queue'),
      ...this.acquireBounds,
      text: queueAs === undefined ? this.sql.acquire : this.sql.acquireOrQueue,
      values: [...acquireParameters(request, this.options), ...queueValues],
    }).catch((error: unknown) => {
      throw (
        exhausted(error, 'fencing_token', this.n.fencingSequence) ??
        exhausted(error, 'seq', this.n.waiterSequence) ??
        readOnly(error, request.targetKey) ??
        error
      );
    });
    return acquireOutcome(rows[0], sentAt, queueAs !== undefined);
  }

  /**
   * Renews every lease in the batch with one statement. Rows locked by another transaction — typically a fenced
   * transaction of this very process — are skipped, not waited for (SKIP LOCKED): one lease's long fence must not
   * cost the others their renewal. An expired row is never renewed, even with the right token: its holder has
   * already given it up locally, and reviving it would block the key for another timeout.
   *
   * With `history`, the same statement asks the server where it stands (so on the same server, even behind a pooler
   * whose client connection survived a failover): a lease acquired under another history — another timeline than its
   * fencing token carries, another system identifier — is not renewed but reported in `failover`. Its row on a
   * promoted server may be older than its holder believes (an asynchronous standby misses renewals), so the local
   * deadline no longer protects it. A server in recovery refuses the statement (it writes); the history is then read
   * alone, and every lease is reported in `failover`.
   *
   * One round trip on the heartbeat's own connection (see `runStatement`), planned for its parameters.
   */
  async renew(
    rows: readonly RenewedRow[],
    leaseTokens: string[],
    timeoutMs: number,
    history?: LeaseHistory,
  ): Promise<RenewResult> {
    try {
      return await this.renewOnce(rows, leaseTokens, timeoutMs, history);
    } catch (error) {
      // The heartbeat's role (sessionUrl may name another) may not read the system identifier: go on without it.
      if (history && systemIdRefused(error) && this.systemIdReadable) {
        this.systemIdReadable = false;
        return this.renew(rows, leaseTokens, timeoutMs, history);
      }
      if (history && readOnly(error, '')) {
        const here = await readHistoryOn(this.heartbeatDb, this.sql, this.systemIdReadable, timeoutMs);
        if (!here.recovery) throw error;
        // In recovery every lease is lost to the failover under way; otherwise the refusal is the tick's error.
        return {
          kept: new Set(),
          skipped: new Set(),
          expired: new Set(),
          history: here,
          failover: new Set(leaseTokens),
        };
      }
      throw error;
    }
  }

  private async renewOnce(
    leases: readonly RenewedRow[],
    leaseTokens: string[],
    timeoutMs: number,
    history?: LeaseHistory,
  ): Promise<RenewResult> {
    const { rows } = await runStatement<RenewRow>(this.heartbeatDb, {
      ...this.statement(this.systemIdReadable ? 'renew' : 'renew_no_system_id'),
      boundMs: timeoutMs,
      customPlans: true,
      text: this.systemIdReadable ? this.sql.renew : this.sql.renewWithoutSystemId,
      values: [
        leases.map((row) => row.targetKey),
        leaseTokens,
        history ? history.fencingTokens.map((token) => timelineOf(token).toString()) : null,
        history?.systemId ?? null,
        leases.map((row) => row.leaseTimeoutMs ?? this.options.leaseTimeoutMs),
        leases.map((row) => row.slot),
      ],
    });
    return renewOutcome(rows, history);
  }

  /**
   * Bootstrap, and a renewal that found another system: where new tokens stand (`settleTokens`: the timeline they
   * carry, sequences raised above the tables); every statement is rebuilt with a fixed timeline, or without one.
   */
  async probeTimeline(): Promise<TokenStanding> {
    const standing = await settleTokens((statement) => this.run(statement), this.sql, this.options);
    this.rebuild({ ...this.settings, timeline: standing.fixed ?? undefined });
    return standing;
  }

  /**
   * Test-only: the statements from now on carry `faults` (the fault schedule's negative controls, see
   * statement-faults.ts). Called before the first statement, through `useStatementFaults` of internal.ts.
   */
  useStatementFaults(faults: StatementFaults): void {
    this.rebuild({ ...this.settings, faults });
  }

  private rebuild(settings: StatementSettings): void {
    this.settings = settings;
    ({ sql: this.sql, named: this.statement } = buildStatements(this.options, settings));
  }

  /** Bootstrap: where the server stands in its history (`readServerHistory`). */
  async serverHistory(): Promise<ServerHistory> {
    const read = await readServerHistory((statement) => this.run(statement), this.sql, this.options);
    this.systemIdReadable = read.systemIdReadable;
    return read.history;
  }

  /**
   * Token-guarded soft release: clears the lease token and keeps the row (with its fencing token), so the next
   * acquisition of the key draws its token under the row lock (see `tryAcquire`); the old token then matches nothing
   * (no renewal, no release, no fenced write). Releases are batched like acquisitions (group commit). When the target
   * has a live waiter, the NOTIFY names the next one only (head-only handoff, `headChannel`: `<waiter id> <key>`,
   * never a token): only that waiter's process attempts, the others sleep on. Returns whether our lease was released.
   * Idempotent: the engine retries one that failed (see `LeaseEngine.release`).
   */
  async release(row: RowRef, leaseToken: string, timeoutMs: number, lone = false): Promise<boolean> {
    // A slot row: its own statements (they wake the key's line; a semaphore's are batched, see SemaphoreStore).
    if (row.slot > 0) return this.slots.release(row, leaseToken, timeoutMs);
    const { targetKey } = row;
    if (this.options.maxBatchSize === 1) return this.releaseOnce(targetKey, leaseToken, timeoutMs, lone);
    const outcome = await this.releases.submit({ targetKey, leaseToken, timeoutMs, lone });
    // The row was locked by another transaction (a fenced write still finishing): alone, waiting for it.
    return outcome === 'retry' ? this.releaseOnce(targetKey, leaseToken, timeoutMs) : outcome;
  }

  private async sendReleases(items: ReleaseItem[]): Promise<Array<ItemOutcome<boolean | 'retry'>>> {
    if (items.length === 1) {
      const [item] = items as [ReleaseItem];
      const released = await this.releaseOnce(item.targetKey, item.leaseToken, item.timeoutMs, item.lone);
      return [{ ok: true, value: released }];
    }
    const batch = items.map((item, index) => ({
      i: index + 1,
      target_id: item.targetKey,
      lease_token: item.leaseToken,
    }));
    const { asyncReleaseCommits, agingIntervalMs } = this.options;
    const { rows } = await retryingSerializationFailures(() =>
      this.run<{ i: number; outcome: 'released' | 'gone' | 'retry' }>({
        ...this.statement('release_batch'),
        boundMs: Math.min(...items.map((item) => item.timeoutMs)),
        text: this.sql.batchRelease,
        values: [JSON.stringify(batch), this.notifyChannel, asyncReleaseCommits, agingIntervalMs],
      }),
    );
    return releaseBatchOutcomes(items.length, rows);
  }

  /**
   * The single release statement: waits for a locked row, within its bound. `lone` (the lease's acquisition found no
   * line, see `loneAcquireSql`): the lean statement first, the single one only if a line formed meanwhile.
   */
  private async releaseOnce(targetKey: string, leaseToken: string, timeoutMs: number, lone = false): Promise<boolean> {
    if (lone) {
      const released = await this.lone.release(targetKey, leaseToken, timeoutMs);
      if (released !== 'line') return released;
    }
    const { rows } = await retryingSerializationFailures(() =>
      this.run<{ released: boolean }>({
        ...this.statement('release'),
        boundMs: timeoutMs,
        text: this.sql.release,
        values: [
          targetKey,
          leaseToken,
          this.notifyChannel,
          this.options.asyncReleaseCommits,
          this.options.agingIntervalMs,
          lockWaitMs(timeoutMs),
        ],
      }),
    );
    return rows[0]?.released === true;
  }

  /**
   * The channel of head-only wake-ups (payload `<waiter id> <key>`). A channel of its own: a key may itself look like
   * such a payload, and a process of an older version, listening on `channel` for keys, simply does not hear these
   * and falls back to its poll.
   */
  get headChannel(): string {
    return headChannelOf(this.options.tableName);
  }

  /** The head channel when NOTIFY is on, else null (the statements then notify nobody). */
  private get notifyChannel(): string | null {
    return this.options.notify ? this.headChannel : null;
  }

  /** One purge of free rows (see `PurgeStore.purge`). */
  purge(stop: () => boolean = () => false): Promise<number> {
    return this.purges.purge(stop);
  }

  /**
   * Holders (live or expired; released rows hold nothing) and waiters, each target's waiters in grant order; ages by
   * the database clock.
   */
  async snapshot(targetKey?: string): Promise<SnapshotRow[]> {
    const { rows } = await this.run<SnapshotRow>({
      text: this.sql.snapshot,
      values: [targetKey ?? null, this.options.agingIntervalMs],
    });
    return rows;
  }
}
