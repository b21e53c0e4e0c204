/**
 * Client-side group commit: pays for a commit once per batch of calls, not once per call, the way PostgreSQL's own
 * group commit does for WAL flushes.
 *
 * While a batch is in flight, further calls queue; when it returns, everything queued (up to `maxBatch`) goes in the
 * next batch: one statement, one commit. An idle queue sends at the end of the current turn of the event loop (no
 * timer): the calls made in that turn go together — typically the callers of the batch that just returned, each moving
 * on to its next step. A lone caller's rhythm (the last batch a single call, nothing in flight or queued) skips even
 * that turn: its call goes at once, as it would with no group commit, and a burst arriving meanwhile queues behind it
 * and goes as the next batch. Each caller gets its own result or its own error:
 * - the batch function returns one outcome per item (a refusal is a result, not an error);
 * - a batch that fails as a whole with a statement error (PostgreSQL rolled it back: nothing was written) is split,
 *   every item sent again alone, so a bad row fails only its own caller;
 * - a batch that fails for any other reason (connection lost, client timeout: the outcome is unknown) fails every
 *   caller with that error, exactly as if each had sent its own statement and lost the connection.
 *
 * Independence (a stalled statement of one lease costs no other lease): a batch still in flight after `stallMs` no
 * longer counts against `maxInFlight`, so the calls queued behind it go in a batch of their own instead of waiting
 * for it. The statements never wait for a row lock held by another transaction (see `LeaseStore`), so a batch stalls
 * only when the server or the network does.
 */

/** One item's outcome in a batch. */
export type ItemOutcome<O> = { ok: true; value: O } | { ok: false; error: unknown };

export interface GroupCommitOptions {
  /** Most items in one statement: bounds the statement's run time and the rows it locks. */
  maxBatch: number;
  /** Batches in flight at once (each on its own pooled connection). */
  maxInFlight: number;
  /** A batch in flight for longer than this stops holding back the queue (see the module note). */
  stallMs: number;
  /** Whether a failed batch may be split and its items sent alone (the statement wrote nothing). */
  splittable: (error: unknown) => boolean;
}

interface Entry<I, O> {
  item: I;
  /** Told the size of the batch the item went in (the last one, when a failed batch is split). */
  onBatch?: (size: number) => void;
  resolve: (value: O) => void;
  reject: (error: unknown) => void;
}

/** Counters, for tests and benchmarks. */
export interface GroupCommitStats {
  batches: number;
  items: number;
  /** The largest batch sent so far. */
  largest: number;
  /** Batches split after a statement error. */
  splits: number;
}

/** A batch in flight; `counted` while it holds back the queue (until it returns or stalls). */
interface InFlight {
  startedAt: number;
  counted: boolean;
}

export class GroupCommit<I, O> {
  private readonly queue: Array<Entry<I, O>> = [];
  private readonly running = new Set<InFlight>();
  /** Batches in flight that still hold back the queue (not stalled). */
  private inFlight = 0;
  /** Armed only while calls wait behind full slots: the lone-call path sets no timer. */
  private watchdog?: NodeJS.Timeout;
  /** A pump is due at the end of this turn of the event loop (see submit). */
  private scheduled = false;
  /** The size of the last batch sent (0: none yet): 1 is a lone caller's rhythm (see submit). */
  private lastBatch = 0;
  readonly stats: GroupCommitStats = { batches: 0, items: 0, largest: 0, splits: 0 };

  constructor(
    private readonly send: (items: I[]) => Promise<Array<ItemOutcome<O>>>,
    private readonly options: GroupCommitOptions,
  ) {
    if (!Number.isInteger(options.maxBatch) || options.maxBatch < 1) throw new RangeError('maxBatch must be ≥ 1');
    if (!Number.isInteger(options.maxInFlight) || options.maxInFlight < 1) {
      throw new RangeError('maxInFlight must be ≥ 1');
    }
  }

  /** Queues `item`; `onBatch` learns the size of the batch it goes in (for traces). */
  submit(item: I, onBatch?: (size: number) => void): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ item, onBatch, resolve, reject });
      // A free slot sends at the end of this turn of the event loop, not at once: calls made in the same turn (the
      // callers of the batch that just returned, moving on to their next step) go together. No timer: nothing waits
      // when there is nothing to group.
      if (this.inFlight >= this.options.maxInFlight) this.arm();
      else if (this.lastBatch === 1 && this.inFlight === 0 && this.queue.length === 1 && !this.scheduled) {
        // A lone caller's next call (the last batch was a single call, nothing else in flight or queued): at once.
        this.pump();
      } else if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => {
          this.scheduled = false;
          this.pump();
        });
      }
    });
  }

  private pump(): void {
    while (this.inFlight < this.options.maxInFlight && this.queue.length > 0) {
      const batch = this.queue.splice(0, this.options.maxBatch);
      this.lastBatch = batch.length;
      const flight: InFlight = { startedAt: performance.now(), counted: true };
      this.running.add(flight);
      this.inFlight++;
      this.stats.batches++;
      this.stats.items += batch.length;
      this.stats.largest = Math.max(this.stats.largest, batch.length);
      // Never rejects: every outcome is handed to its caller inside run(), once the flight has landed (no longer in
      // flight, the queue pumped): a caller moving on at once finds the group as it is, not a batch still counted.
      void this.run(batch, () => {
        this.running.delete(flight);
        if (flight.counted) this.inFlight--;
        this.pump();
      });
    }
    if (this.queue.length > 0) this.arm();
    else if (this.watchdog) {
      clearTimeout(this.watchdog);
      this.watchdog = undefined;
    }
  }

  /** When the oldest counted batch passes `stallMs`, it stops holding back the calls queued behind it. */
  private arm(): void {
    if (this.watchdog) return;
    let oldest = Infinity;
    for (const flight of this.running) if (flight.counted) oldest = Math.min(oldest, flight.startedAt);
    if (oldest === Infinity) return;
    const delay = Math.max(0, oldest + this.options.stallMs - performance.now());
    this.watchdog = setTimeout(() => {
      this.watchdog = undefined;
      const now = performance.now();
      for (const flight of this.running) {
        if (flight.counted && now - flight.startedAt >= this.options.stallMs) {
          flight.counted = false;
          this.inFlight--;
        }
      }
      this.pump();
    }, delay);
    this.watchdog.unref();
  }

  /**
   * Sends `batch` and hands each caller its outcome; `landed` as soon as no statement of the batch is in flight: before
   * the outcomes (a split batch's items, each sent alone, deliver their own first).
   */
  private async run(batch: Array<Entry<I, O>>, landed: () => void = () => undefined): Promise<void> {
    for (const entry of batch) entry.onBatch?.(batch.length);
    let outcomes: Array<ItemOutcome<O>>;
    try {
      outcomes = await this.send(batch.map((entry) => entry.item));
    } catch (error) {
      if (batch.length > 1 && this.options.splittable(error)) {
        // The statement wrote nothing: each item alone tells which one was bad, and the others still succeed.
        this.stats.splits++;
        await Promise.all(batch.map((entry) => this.run([entry])));
        landed();
        return;
      }
      landed();
      for (const entry of batch) entry.reject(error);
      return;
    }
    landed();
    batch.forEach((entry, index) => {
      const outcome = outcomes[index];
      if (!outcome) entry.reject(new Error('nest-pg-lease: a batch returned no outcome for this call (a bug)'));
      else if (outcome.ok) entry.resolve(outcome.value);
      else entry.reject(outcome.error);
    });
  }
}
