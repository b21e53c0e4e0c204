/**
 * Prototype (issue 14, part 1): the client-side batching queue of group commit, independent of what it batches.
 *
 * While `maxInFlight` batches are in flight, further calls queue; when one returns, everything queued (up to
 * `maxBatch`) goes in the next batch: one statement, one commit. An idle queue sends a call at once, alone, so group
 * commit adds no latency when there is nothing to group. Each caller gets its own result or its own error:
 * - the batch function returns one outcome per item (a refusal is a result, not an error);
 * - a batch that fails as a whole with a statement error (PostgreSQL rolled it back: nothing was written) is split,
 *   every item sent again alone, so a bad row fails only its own caller;
 * - a batch that fails for any other reason (connection lost, client timeout: the outcome is unknown) fails every
 *   caller with that error, exactly as if each had sent its own statement and lost the connection;
 * - a caller that aborts while queued leaves the queue at once; once sent, its item is in the statement (the
 *   caller's own deadline logic releases a late lease, as the single path does).
 */

/** One item's outcome in a batch. */
export type ItemOutcome<O> = { ok: true; value: O } | { ok: false; error: unknown };

export interface GroupCommitOptions {
  /** Most items in one statement: bounds the statement's run time and the rows it locks. */
  maxBatch: number;
  /** Batches in flight at once (each on its own pooled connection). 1 is classic group commit. */
  maxInFlight: number;
  /** Whether a failed batch may be split and its items sent alone (the statement wrote nothing). */
  splittable: (error: unknown) => boolean;
}

interface Entry<I, O> {
  item: I;
  resolve: (value: O) => void;
  reject: (error: unknown) => void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

export interface GroupCommitStats {
  batches: number;
  items: number;
  largest: number;
  splits: number;
}

export class GroupCommit<I, O> {
  private readonly queue: Array<Entry<I, O>> = [];
  private inFlight = 0;
  private idle?: () => void;
  readonly stats: GroupCommitStats = { batches: 0, items: 0, largest: 0, splits: 0 };

  constructor(
    private readonly send: (items: I[]) => Promise<Array<ItemOutcome<O>>>,
    private readonly options: GroupCommitOptions,
  ) {
    if (!Number.isInteger(options.maxBatch) || options.maxBatch < 1) throw new RangeError('maxBatch must be ≥ 1');
    if (!Number.isInteger(options.maxInFlight) || options.maxInFlight < 1)
      throw new RangeError('maxInFlight must be ≥ 1');
  }

  /** Items waiting for a batch (not yet sent). */
  get queued(): number {
    return this.queue.length;
  }

  submit(item: I, signal?: AbortSignal): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      // The signal's reason is the caller's own value (an Error unless they chose otherwise): passed on as given.
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      if (signal?.aborted) return reject(signal.reason);
      const entry: Entry<I, O> = { item, resolve, reject, signal };
      if (signal) {
        entry.onAbort = () => {
          const at = this.queue.indexOf(entry);
          if (at < 0) return; // already sent: the statement decides
          this.queue.splice(at, 1);
          // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
          reject(signal.reason);
        };
        signal.addEventListener('abort', entry.onAbort, { once: true });
      }
      this.queue.push(entry);
      this.pump();
    });
  }

  /** Resolves once nothing is queued or in flight (shutdown). */
  drained(): Promise<void> {
    if (this.inFlight === 0 && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const previous = this.idle;
      this.idle = () => {
        previous?.();
        resolve();
      };
    });
  }

  private pump(): void {
    while (this.inFlight < this.options.maxInFlight && this.queue.length > 0) {
      const batch = this.queue.splice(0, this.options.maxBatch);
      for (const entry of batch) if (entry.onAbort) entry.signal!.removeEventListener('abort', entry.onAbort);
      this.inFlight++;
      this.stats.batches++;
      this.stats.items += batch.length;
      this.stats.largest = Math.max(this.stats.largest, batch.length);
      void this.run(batch).finally(() => {
        this.inFlight--;
        this.pump();
        if (this.inFlight === 0 && this.queue.length === 0) {
          const idle = this.idle;
          this.idle = undefined;
          idle?.();
        }
      });
    }
  }

  private async run(batch: Array<Entry<I, O>>): Promise<void> {
    let outcomes: Array<ItemOutcome<O>>;
    try {
      outcomes = await this.send(batch.map((entry) => entry.item));
    } catch (error) {
      if (batch.length > 1 && this.options.splittable(error)) {
        // The statement wrote nothing: each item alone tells which one was bad, and the others still succeed.
        this.stats.splits++;
        await Promise.all(batch.map((entry) => this.run([entry])));
        return;
      }
      for (const entry of batch) entry.reject(error);
      return;
    }
    batch.forEach((entry, index) => {
      const outcome = outcomes[index];
      if (!outcome) entry.reject(new Error('the batch returned no outcome for this item'));
      else if (outcome.ok) entry.resolve(outcome.value);
      else entry.reject(outcome.error);
    });
  }
}

/**
 * A statement error after which the statement provably wrote nothing and can be sent again in parts: PostgreSQL
 * answered with an ERROR (it has a SQLSTATE) other than the connection and operator classes (08, 57: the outcome of a
 * COMMIT may be unknown there). Client-side timeouts and network errors have no SQLSTATE: never split.
 */
export function isStatementError(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !/^[0-9A-Z]{5}$/.test(code)) return false;
  return !code.startsWith('08') && !code.startsWith('57');
}
