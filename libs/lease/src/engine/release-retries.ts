/**
 * Releases that failed, retried in the background until they land (or shutdown ends them): a release is idempotent
 * and token-guarded, and a row left naming this process would block its key until it expires, and then go on naming
 * this process (in `list()`, on dashboards) until someone takes it over. Retried past the row's expiry too, at most
 * once per heartbeat interval: after an outage longer than the lease timeout the row is released once the database
 * answers again. Collaborators given explicitly: the backend, the options, the engine's logger, its tracking of work in
 * flight (for `close()`) and whether it is closing.
 */
import type { Logger } from '@nestjs/common';
import { errorText } from '../errors/lease.messages.js';
import type { EngineSettings } from '../options/engine-settings.js';
import { shortBoundMs } from '../options/bounds.js';
import type { LeaseBackend, ParkRequest, RowRef, WaiterPlace } from '../core/backend.js';

/** A release that failed, retried until it lands (see the module note). */
interface Unreleased {
  readonly row: RowRef;
  readonly token: string;
  /** Monotonic time after which the row has expired by itself (from then on, one try per heartbeat interval). */
  readonly until: number;
  delayMs: number;
  timer?: NodeJS.Timeout;
}

export class ReleaseRetries {
  /** Releases that failed and are retried (by lease token). */
  private readonly unreleased = new Map<string, Unreleased>();

  constructor(
    private readonly backend: Pick<LeaseBackend, 'release' | 'releaseAndPark'>,
    private readonly options: EngineSettings,
    private readonly logger: Logger,
    private readonly track: <T>(work: Promise<T>) => Promise<T>,
    private readonly closing: () => boolean,
  ) {}

  /**
   * One release statement; on failure, the retries of `release` (with the single statement). Never rejects. `lone`:
   * the lease's acquisition found no line (see `LeaseStore.release`).
   */
  releaseRow(row: RowRef, token: string, until: number, onReleased?: () => void, lone = false): Promise<void> {
    return this.track(
      this.backend.release(row, token, shortBoundMs(this.options), lone).then(
        (released) => {
          if (released) onReleased?.();
        },
        (error: unknown) => this.retryRelease({ row, token, until, delayMs: 50 }, error, onReleased),
      ),
    );
  }

  /**
   * `releaseRow` by the release that also queues `park` when it hands the key over (`LeaseBackend.releaseAndPark`;
   * the backend has it). Resolves with the parked place, null when none was queued, or `unknown` when the statement
   * failed (its commit may have landed with the place: the caller removes it) — the release is then retried as
   * `releaseRow`'s. Never rejects.
   */
  releaseParking(
    row: RowRef,
    token: string,
    until: number,
    park: ParkRequest,
    onReleased?: () => void,
  ): Promise<WaiterPlace | null | 'unknown'> {
    return this.track(
      this.backend.releaseAndPark!(row.targetKey, token, shortBoundMs(this.options), park).then(
        ({ released, place }) => {
          if (released) onReleased?.();
          return place;
        },
        (error: unknown) => {
          this.retryRelease({ row, token, until, delayMs: 50 }, error, onReleased);
          return 'unknown' as const;
        },
      ),
    );
  }

  private retryRelease(entry: Unreleased, error: unknown, onReleased?: () => void): void {
    const leftMs = entry.until - performance.now();
    if (this.closing()) {
      this.unreleased.delete(entry.token);
      this.logger.warn(`Release of "${entry.row.targetKey}" failed (${errorText(error)}); the lease expires by itself`);
      return;
    }
    if (!this.unreleased.has(entry.token)) {
      this.logger.warn(
        `Release of "${entry.row.targetKey}" failed (${errorText(error)}); retrying until it lands (the lease would ` +
          `expire by itself in ${Math.max(0, Math.round(leftMs))} ms)`,
      );
    }
    this.unreleased.set(entry.token, entry);
    entry.timer = setTimeout(() => {
      entry.delayMs = Math.min(entry.delayMs * 2, this.options.heartbeatIntervalMs);
      void this.retryNow(entry, onReleased);
    }, entry.delayMs);
    entry.timer.unref();
  }

  /** The next try of a failed release (at its timer, or at once at shutdown). */
  retryNow(entry: Unreleased, onReleased?: () => void): Promise<void> {
    clearTimeout(entry.timer);
    return this.track(
      this.backend.release(entry.row, entry.token, shortBoundMs(this.options)).then(
        (released) => {
          if (this.unreleased.delete(entry.token)) {
            this.logger.log(`Release of "${entry.row.targetKey}" landed once the database answered again`);
          }
          if (released) onReleased?.();
        },
        (error: unknown) => this.retryRelease(entry, error, onReleased),
      ),
    );
  }

  /** Every release still retried, tried once more now (shutdown). */
  retryAll(): Array<Promise<void>> {
    return [...this.unreleased.values()].map((entry) => this.retryNow(entry));
  }

  /** Stops every retry (the end of shutdown). */
  clear(): void {
    for (const entry of this.unreleased.values()) clearTimeout(entry.timer);
    this.unreleased.clear();
  }
}
