/**
 * When this process purges free lease rows (`LeaseStore.purge`): the first run at a random point of the first
 * interval (processes restarted together spread out, and a bootstrap never waits for or competes with a purge), then
 * every `PURGE_INTERVAL_MS` ± a tenth. A failed run is logged and the next one tries again; runs are tracked for
 * close(), and none starts once the engine closes.
 */
import type { Logger } from '@nestjs/common';
import { PURGE_INTERVAL_MS } from '../options/bounds.js';
import type { LeaseBackend } from '../core/backend.js';

export class PurgeSchedule {
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly backend: Pick<LeaseBackend, 'purge'>,
    private readonly logger: Logger,
    /** Tracks a run for close() (the engine's `track`). */
    private readonly track: <T>(work: Promise<T>) => Promise<T>,
    private readonly closing: () => boolean,
  ) {}

  /** Schedules the first run (at bootstrap). */
  start(): void {
    this.schedule(PURGE_INTERVAL_MS * (0.1 + Math.random() * 0.9));
  }

  /** One run now; resolves with the count deleted (null: it failed). */
  now(): Promise<number | null> {
    return this.track(
      this.backend.purge(this.closing).catch((error: unknown) => {
        this.logger.warn(`Purging free lease rows failed (retried later): ${String(error)}`);
        return null;
      }),
    );
  }

  stop(): void {
    clearTimeout(this.timer);
  }

  private schedule(delayMs: number): void {
    if (this.closing()) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      void this.now().finally(() => this.schedule(PURGE_INTERVAL_MS * (0.9 + Math.random() * 0.2)));
    }, delayMs);
    this.timer.unref();
  }
}
