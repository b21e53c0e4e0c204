/**
 * The drains in force, as this process knows them (docs/console.md). Checked before every acquisition
 * from memory — the acquire statement is unchanged and pays nothing — and re-read from the drain table every
 * `DRAIN_REFRESH_MS` while the process attempts acquisitions, so a drain made in another process takes effect here
 * within that bound plus one statement; the process that drains applies it at once (`LeaseOperator` calls `refresh`).
 * A process that attempts nothing for a refresh period (it holds and renews leases, or is idle) stops reading: its
 * next attempt reads the drains first (`ready`), so a quiet spell never leaves it an old view, and drains cost
 * nothing where nothing is acquired. A refresh that fails keeps the last view (logged); with the operator's tables
 * missing there are no drains.
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
  /**
   * Whether the view is kept fresh by the refresh timer (the process attempted acquisitions within the last period):
   * `active` can be trusted without a read. False once a period passed without an attempt, or after `stop()`.
   */
  current = false;
  /**
   * An attempt since the last refresh: the timer reads again (else it stops, and `current` turns false). Set by every
   * attempt — a field, so that an attempt with a current view calls nothing here (`ready` when it is not).
   */
  attempted = false;
  /** The read a quiet process's next attempt waits for (one for every attempt that arrives meanwhile). */
  private waking?: Promise<void>;
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
    this.current = false;
    clearTimeout(this.timer);
  }

  /**
   * Before `check`, for an attempt whose view is not current (the engine only sets `attempted` otherwise) and for a
   * join: the drains are read now (the first attempt after a quiet period waits for one statement; the attempts that
   * arrive meanwhile wait for the same one), and the timer keeps the view current while attempts go on. Never rejects
   * (a failed read keeps the last view, as a refresh does).
   */
  ready(): Promise<void> | undefined {
    this.attempted = true;
    if (this.current || this.stopped) return undefined;
    return (this.waking ??= this.refresh().finally(() => {
      this.waking = undefined;
      this.schedule();
    }));
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

  /** The next refresh in a period, if an attempt comes meanwhile; else the view stops being current. */
  private schedule(): void {
    if (this.stopped) return;
    this.current = true;
    this.attempted = false;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      if (this.attempted) void this.refresh().finally(() => this.schedule());
      else this.current = false;
    }, DRAIN_REFRESH_MS);
    this.timer.unref();
  }
}
