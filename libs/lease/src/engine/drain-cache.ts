/**
 * The drains in force, as this process knows them (docs/console.md). Checked before every acquisition
 * from memory — the acquire statement is unchanged and pays nothing — and re-read from the drain table every
 * `DRAIN_REFRESH_MS`, so a drain made in another process takes effect here within that bound plus one statement; the
 * process that drains applies it at once (`LeaseOperator` calls `refresh`). A refresh that fails keeps the last view
 * (logged); with the operator's tables missing there are no drains.
 */
import type { Logger } from '@nestjs/common';
import { LeaseDrainedError } from '../errors/lease.errors.js';
import type { DrainEntry } from '../interfaces/lease-operator.interface.js';
import { DRAIN_REFRESH_MS } from '../options/bounds.js';
import type { OperatorBackend } from '../core/backend.js';

export class DrainCache {
  /**
   * Whether any drain is in force: a plain field the engine reads before every attempt, so that a process with no
   * drain (nearly always) makes no call for it.
   */
  active = false;
  private keys = new Map<string, DrainEntry>();
  private templates = new Map<string, DrainEntry>();
  private timer?: NodeJS.Timeout;
  private stopped = false;
  private warned = false;
  /** A refresh failed and none succeeded since (its warning is said once per streak). */
  private failing = false;

  constructor(
    readonly store: OperatorBackend,
    private readonly logger: Logger,
    /** Tracks a refresh for close() (the engine's `track`). */
    private readonly track: <T>(work: Promise<T>) => Promise<T>,
    private readonly retryAfterMs: number,
  ) {}

  /** Reads the drains once (bootstrap waits for it: drains hold from the first call), then every refresh interval. */
  async start(): Promise<void> {
    this.stopped = false;
    await this.refresh();
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /** Refuses an acquisition of a drained key, or of a key whose template is drained (needed only when `active`). */
  check(targetKey: string, keyTemplate: string): void {
    const drain = this.keys.get(targetKey) ?? this.templates.get(keyTemplate);
    if (drain) throw new LeaseDrainedError(targetKey, this.retryAfterMs, drain);
  }

  /** Re-reads the drain table; never rejects. */
  refresh(): Promise<void> {
    return this.track(
      this.store.drains().then(
        (drains) => {
          if (this.failing) this.logger.log('Reading the drains works again');
          this.failing = false;
          this.keys = new Map(drains.filter((d) => d.kind === 'key').map((d) => [d.subject, d]));
          this.templates = new Map(drains.filter((d) => d.kind === 'template').map((d) => [d.subject, d]));
          this.active = this.keys.size > 0 || this.templates.size > 0;
        },
        (error: unknown) => {
          if (this.store.missingTable(error)) {
            if (!this.warned) this.logger.warn(`Drains are off in this process: ${String(error)}`);
            this.warned = true;
            return;
          }
          // Once per failure streak (a read a second would repeat it): the next success says it is over.
          if (!this.failing)
            this.logger.warn(`Reading the drains failed (the last view holds; retried): ${String(error)}`);
          this.failing = true;
        },
      ),
    );
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.refresh().finally(() => this.schedule()), DRAIN_REFRESH_MS);
    this.timer.unref();
  }
}
