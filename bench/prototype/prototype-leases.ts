/**
 * Prototype (issue 14, part 1): a minimal lease engine over the set-based statements of batch-statements.ts, to
 * measure client-side group commit and head-only handoff without touching the library. It acquires, releases and
 * waits exactly as the library does at the database (same tables, same rules), but keeps no heartbeat, no events
 * and no abort signals: the benchmark windows are far shorter than a lease or waiter timeout. Part 2 moves the
 * statements into lease-store.ts and `GroupCommit` in front of `LeaseStore.tryAcquire` / `release`.
 */
import { createHash, randomUUID } from 'node:crypto';
import pg from 'pg';
import {
  batchAcquireSql,
  batchReleaseSql,
  dequeueSql,
  enqueueSql,
  leanAcquireSql,
  leanReleaseSql,
  objectNames,
  parseHeadPayload,
  quoteIdentifier,
  type AcquireBatchItem,
  type BatchAcquireRow,
  type BatchReleaseRow,
  type LeaseNames,
  type TokenLayout,
} from './batch-statements.js';
import { GroupCommit, isStatementError, type ItemOutcome } from './group-commit.js';

export interface PrototypeOptions {
  names: LeaseNames;
  owner: string;
  leaseTimeoutMs: number;
  /** false: every call sends its own statement at once (the same statement with arrays of one). */
  groupCommit: boolean;
  /** Most callers in one statement. */
  maxBatch: number;
  /** Acquire batches (and, separately, release batches) in flight at once. */
  maxInFlight: number;
  /** A release names the next waiter; only that waiter's process attempts. false: every waiter of the key wakes. */
  headOnly: boolean;
  /** LISTEN/NOTIFY wake-ups (else waiters poll). */
  notify: boolean;
  tokenLayout: TokenLayout;
  asyncReleaseCommits: boolean;
  waiterTimeoutMs: number;
  waitPollIntervalMs: number;
  maxWaitersPerTarget: number;
  agingIntervalMs: number | null;
}

export const PROTOTYPE_DEFAULTS: Omit<PrototypeOptions, 'names' | 'owner'> = {
  leaseTimeoutMs: 60_000,
  groupCommit: true,
  maxBatch: 128,
  maxInFlight: 1,
  headOnly: true,
  notify: true,
  tokenLayout: 'plain',
  asyncReleaseCommits: false,
  waiterTimeoutMs: 15_000,
  waitPollIntervalMs: 500,
  maxWaitersPerTarget: 1_000,
  agingIntervalMs: null,
};

export interface PrototypeLease {
  readonly targetKey: string;
  readonly token: string;
  readonly fencingToken: bigint;
  /** Monotonic time the statement that granted it was sent (the lease counts from here). */
  readonly sentAt: number;
  readonly tookOver: boolean;
}

interface AcquireItem {
  targetKey: string;
  leaseToken: string;
  priority: number;
  waiterId: string | null;
  waiterSeq: bigint | null;
  holdMs: number;
}

interface AcquireResult {
  row: BatchAcquireRow;
  sentAt: number;
}

interface ReleaseItem {
  targetKey: string;
  leaseToken: string;
}

interface Waiter {
  readonly id: string;
  readonly targetKey: string;
  readonly priority: number;
  seq?: bigint;
  pending: boolean;
  holdLeftMs?: number;
  wake?: () => void;
}

export class LeaseBusy extends Error {
  constructor(targetKey: string) {
    super(`"${targetKey}" is busy`);
    this.name = 'LeaseBusy';
  }
}

export class WaitTimeout extends Error {
  constructor(targetKey: string, ms: number) {
    super(`no lease on "${targetKey}" within ${ms} ms`);
    this.name = 'WaitTimeout';
  }
}

const RETRYABLE = new Set(['40001', '40P01']);

/** One statement again after a serialization failure or a deadlock (PostgreSQL rolled it back whole). */
async function retrying<T>(statement: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await statement();
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (attempt >= 5 || !code || !RETRYABLE.has(code)) throw error;
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 5 * attempt));
    }
  }
}

export class PrototypeLeases {
  readonly options: PrototypeOptions;
  private readonly n: ReturnType<typeof objectNames>;
  private readonly prefix: string;
  private readonly acquisitions: GroupCommit<AcquireItem, AcquireResult>;
  private readonly releases: GroupCommit<ReleaseItem, BatchReleaseRow>;
  private readonly waiters = new Map<string, Waiter>();
  private readonly byTarget = new Map<string, Set<Waiter>>();
  private listener?: Promise<pg.Client>;
  private closed = false;
  /** Callers a batch answered `retry` (row locked by another transaction), sent again alone. */
  private retried = 0;

  constructor(
    private readonly pool: pg.Pool,
    options: Partial<PrototypeOptions> & Pick<PrototypeOptions, 'names'>,
    private readonly listenConfig?: pg.ClientConfig,
  ) {
    this.options = { ...PROTOTYPE_DEFAULTS, owner: `proto:${process.pid}:${randomUUID().slice(0, 8)}`, ...options };
    this.n = objectNames(this.options.names);
    const { names, tokenLayout, headOnly } = this.options;
    this.prefix = `proto_${createHash('sha1')
      .update(`${names.schema}.${names.tableName}.${names.waiterTableName}.${tokenLayout}.${headOnly}`)
      .digest('hex')
      .slice(0, 10)}`;
    const maxBatch = this.options.groupCommit ? this.options.maxBatch : 1;
    // Without group commit every call is its own statement at once: as many in flight as callers.
    const maxInFlight = this.options.groupCommit ? this.options.maxInFlight : Number.MAX_SAFE_INTEGER;
    this.acquisitions = new GroupCommit((items) => this.sendAcquire(items, false), {
      maxBatch,
      maxInFlight,
      splittable: isStatementError,
    });
    this.releases = new GroupCommit((items) => this.sendRelease(items, false), {
      maxBatch,
      maxInFlight,
      splittable: isStatementError,
    });
  }

  /** Batches sent and their sizes so far (acquisitions, releases). */
  stats() {
    return { acquire: { ...this.acquisitions.stats }, release: { ...this.releases.stats }, retried: this.retried };
  }

  /** One attempt: the lease, or null when the key is taken or a live waiter is ahead. */
  async tryAcquire(
    targetKey: string,
    options: { priority?: number; holdAtLeastMs?: number } = {},
    waiter?: Waiter,
  ): Promise<PrototypeLease | null> {
    if (this.closed) throw new Error('PrototypeLeases is closed');
    const item: AcquireItem = {
      targetKey,
      leaseToken: randomUUID(),
      priority: options.priority ?? 0,
      waiterId: waiter?.id ?? null,
      waiterSeq: waiter?.seq ?? null,
      holdMs: options.holdAtLeastMs ?? 0,
    };
    let { row, sentAt } = await this.acquisitions.submit(item);
    // A row the batch could not lock at once: this caller alone goes the single path, which waits for the lock.
    if (row.outcome === 'retry') {
      this.retried++;
      ({ row, sentAt } = await this.sendAcquireAlone(item));
    }
    if (row.outcome !== 'won') {
      if (waiter) waiter.holdLeftMs = row.hold_left_ms ?? undefined;
      return null;
    }
    return {
      targetKey,
      token: item.leaseToken,
      fencingToken: BigInt(row.fencing_token!),
      sentAt,
      tookOver: row.took_over === true,
    };
  }

  /** Soft release (token-guarded; idempotent). Returns whether the lease was ours until now. */
  async release(lease: PrototypeLease): Promise<boolean> {
    const item = { targetKey: lease.targetKey, leaseToken: lease.token };
    let row = await this.releases.submit(item);
    if (row.outcome === 'retry') {
      this.retried++;
      // Locked by another transaction: this caller alone waits for the row, as the library's release does.
      const [alone] = await this.sendRelease([item], true);
      if (!alone.ok) throw alone.error;
      row = alone.value;
    }
    // The next waiter may be ours: wake it now rather than after the NOTIFY's round trip.
    if (row.next_waiter) this.wakeWaiter(row.next_waiter);
    return row.outcome === 'released';
  }

  /** Acquires, waiting in the priority line (head-only wake-ups) for at most `waitTimeoutMs`. */
  async acquire(targetKey: string, options: { priority?: number; waitTimeoutMs: number }): Promise<PrototypeLease> {
    const first = await this.tryAcquire(targetKey, options);
    if (first) return first;
    const until = performance.now() + options.waitTimeoutMs;
    if (this.options.notify) await this.listen();
    const waiter: Waiter = { id: randomUUID(), targetKey, priority: options.priority ?? 0, pending: false };
    this.register(waiter);
    try {
      const place = await this.pool.query<{ seq: string }>({
        name: `${this.prefix}_enqueue`,
        text: enqueueSql(this.options.names),
        values: [
          targetKey,
          waiter.id,
          this.options.owner,
          waiter.priority,
          this.options.waiterTimeoutMs,
          null,
          null,
          this.options.maxWaitersPerTarget,
        ],
      });
      if (!place.rows[0]) throw new LeaseBusy(targetKey);
      waiter.seq = BigInt(place.rows[0].seq);
      for (;;) {
        waiter.pending = false;
        const lease = await this.tryAcquire(targetKey, options, waiter);
        if (lease) return lease;
        const remaining = until - performance.now();
        if (remaining <= 0) throw new WaitTimeout(targetKey, options.waitTimeoutMs);
        const holdEnds = waiter.holdLeftMs === undefined ? Infinity : waiter.holdLeftMs + 5;
        const poll = this.options.waitPollIntervalMs * (0.5 + Math.random() * 0.5);
        await this.sleep(waiter, Math.min(remaining, poll, holdEnds));
      }
    } catch (error) {
      if (waiter.seq !== undefined) {
        const channel = this.options.notify ? (this.options.headOnly ? this.n.headChannel : this.n.channel) : null;
        await this.pool.query({
          name: `${this.prefix}_dequeue`,
          text: dequeueSql(this.options.names, this.options.headOnly),
          values: [targetKey, waiter.id, channel, this.options.agingIntervalMs],
        });
      }
      throw error;
    } finally {
      this.unregister(waiter);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const waiter of this.waiters.values()) waiter.wake?.();
    await Promise.all([this.acquisitions.drained(), this.releases.drained()]);
    const listener = await this.listener?.catch(() => undefined);
    await listener?.end().catch(() => undefined);
  }

  private async sendAcquireAlone(item: AcquireItem): Promise<AcquireResult> {
    const [outcome] = await this.sendAcquire([item], true);
    if (!outcome.ok) throw outcome.error;
    return outcome.value;
  }

  /**
   * One statement for `items`: the lean single statement for one caller (it waits for a locked row, as the library's
   * does), the set-based one for several (it never waits; a locked row comes back as `retry`).
   */
  private async sendAcquire(items: AcquireItem[], alone: boolean): Promise<Array<ItemOutcome<AcquireResult>>> {
    const single = alone || items.length === 1;
    const config: pg.QueryConfig = single ? this.leanAcquire(items[0]) : this.batchAcquire(items);
    const result = await retrying(async () => {
      // Time the send, not the wait for a pooled connection: the lease counts from when the database could have
      // written updated_at at the earliest.
      const client = await this.pool.connect();
      let broken: Error | undefined;
      const onError = (error: Error) => (broken = error);
      client.on('error', onError);
      const sentAt = performance.now();
      try {
        const { rows } = await client.query(config);
        return { rows, sentAt };
      } catch (error) {
        broken ??= error as Error;
        throw error;
      } finally {
        client.off('error', onError);
        client.release(broken);
      }
    });
    if (single) {
      const row = result.rows[0] as Omit<BatchAcquireRow, 'i' | 'outcome'> | undefined;
      const won = row?.fencing_token != null;
      const value: BatchAcquireRow = {
        i: 1,
        outcome: won ? 'won' : 'refused',
        fencing_token: row?.fencing_token ?? null,
        took_over: row?.took_over ?? null,
        previous_owner: row?.previous_owner ?? null,
        hold_left_ms: row?.hold_left_ms ?? null,
      };
      return [{ ok: true, value: { row: value, sentAt: result.sentAt } }];
    }
    return items.map((_, index) => {
      const row = result.rows[index] as BatchAcquireRow | undefined;
      if (!row || row.i !== index + 1)
        return { ok: false, error: new Error(`batch answered out of order at ${index}`) };
      return { ok: true, value: { row, sentAt: result.sentAt } };
    });
  }

  private leanAcquire(item: AcquireItem): pg.QueryConfig {
    return {
      name: `${this.prefix}_acquire1`,
      text: leanAcquireSql(this.options.names, this.options.tokenLayout),
      values: [
        item.targetKey,
        item.leaseToken,
        this.options.owner,
        item.priority,
        this.options.leaseTimeoutMs,
        item.waiterId,
        item.waiterSeq === null ? null : item.waiterSeq.toString(),
        this.options.agingIntervalMs,
        item.holdMs,
      ],
    };
  }

  private batchAcquire(items: AcquireItem[]): pg.QueryConfig {
    const batch: AcquireBatchItem[] = items.map((item, index) => ({
      i: index + 1,
      target_id: item.targetKey,
      lease_token: item.leaseToken,
      priority: item.priority,
      waiter_id: item.waiterId,
      waiter_seq: item.waiterSeq === null ? null : item.waiterSeq.toString(),
      hold_ms: item.holdMs,
    }));
    return {
      name: `${this.prefix}_acquire`,
      text: batchAcquireSql(this.options.names, this.options.tokenLayout),
      values: [JSON.stringify(batch), this.options.owner, this.options.leaseTimeoutMs, this.options.agingIntervalMs],
    };
  }

  private async sendRelease(items: ReleaseItem[], alone: boolean): Promise<Array<ItemOutcome<BatchReleaseRow>>> {
    const channel = this.options.notify ? (this.options.headOnly ? this.n.headChannel : this.n.channel) : null;
    const { asyncReleaseCommits, agingIntervalMs, names, headOnly } = this.options;
    if (alone || items.length === 1) {
      // The lean single release waits for a locked row: it never answers `retry`.
      const { rows } = await retrying(() =>
        this.pool.query<{ released: boolean; next_waiter: string | null }>({
          name: `${this.prefix}_release1`,
          text: leanReleaseSql(names, headOnly),
          values: [items[0].targetKey, items[0].leaseToken, channel, asyncReleaseCommits, agingIntervalMs],
        }),
      );
      const row = rows[0];
      return [{ ok: true, value: { i: 1, outcome: row.released ? 'released' : 'gone', next_waiter: row.next_waiter } }];
    }
    const batch = items.map((item, index) => ({
      i: index + 1,
      target_id: item.targetKey,
      lease_token: item.leaseToken,
    }));
    const { rows } = await retrying(() =>
      this.pool.query<BatchReleaseRow>({
        name: `${this.prefix}_release`,
        text: batchReleaseSql(names, headOnly),
        values: [JSON.stringify(batch), channel, asyncReleaseCommits, agingIntervalMs],
      }),
    );
    return items.map((_, index) => {
      const row = rows[index];
      if (!row || row.i !== index + 1)
        return { ok: false, error: new Error(`batch answered out of order at ${index}`) };
      return { ok: true, value: row };
    });
  }

  /** One LISTEN connection per engine; both channels, so head-only and key-only wake-ups both reach us. Opened by
   * the first wait, or ahead of time by calling this. */
  listen(): Promise<pg.Client> {
    this.listener ??= (async () => {
      const client = new pg.Client(this.listenConfig ?? this.poolConfig());
      client.on('notification', (message) => {
        if (!message.payload) return;
        if (message.channel === this.n.headChannel) {
          const head = parseHeadPayload(message.payload);
          if (head) this.wakeWaiter(head.waiterId);
        } else if (message.channel === this.n.channel) {
          for (const waiter of this.byTarget.get(message.payload) ?? []) this.wakeOne(waiter);
        }
      });
      client.on('error', () => undefined);
      await client.connect();
      await client.query(`LISTEN ${quoteIdentifier(this.n.channel)}; LISTEN ${quoteIdentifier(this.n.headChannel)}`);
      return client;
    })();
    return this.listener;
  }

  private poolConfig(): pg.ClientConfig {
    const {
      max: _max,
      min: _min,
      idleTimeoutMillis: _idle,
      ...config
    } = (this.pool as unknown as { options: pg.PoolConfig }).options;
    return config;
  }

  private wakeWaiter(waiterId: string): void {
    const waiter = this.waiters.get(waiterId);
    if (waiter) this.wakeOne(waiter);
  }

  private wakeOne(waiter: Waiter): void {
    waiter.pending = true;
    waiter.wake?.();
  }

  private register(waiter: Waiter): void {
    this.waiters.set(waiter.id, waiter);
    let line = this.byTarget.get(waiter.targetKey);
    if (!line) this.byTarget.set(waiter.targetKey, (line = new Set()));
    line.add(waiter);
  }

  private unregister(waiter: Waiter): void {
    this.waiters.delete(waiter.id);
    const line = this.byTarget.get(waiter.targetKey);
    line?.delete(waiter);
    if (line?.size === 0) this.byTarget.delete(waiter.targetKey);
  }

  private sleep(waiter: Waiter, ms: number): Promise<void> {
    return new Promise((resolve) => {
      if (waiter.pending || this.closed) return resolve();
      const done = () => {
        clearTimeout(timer);
        waiter.wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      waiter.wake = done;
    });
  }
}
