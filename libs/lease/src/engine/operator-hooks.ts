/**
 * What the operator's features need of each engine (docs/console.md): the drain cache every acquisition
 * attempt is checked against, and the opt-in journal of its events. The operator's API (`LeaseOperator`) reaches the
 * statements through `store` and refreshes the drains after its own changes.
 */
import type { Logger } from '@nestjs/common';
import type { Observable } from 'rxjs';
import type { LeaseEvent } from '../interfaces/lease-event.interface.js';
import type { EngineSettings } from '../options/engine-settings.js';
import type { OperatorBackend } from '../core/backend.js';
import { DrainCache } from './drain-cache.js';
import { LeaseJournal } from './lease-journal.js';

export class OperatorHooks {
  readonly store: OperatorBackend;
  readonly drains: DrainCache;
  private readonly journal?: LeaseJournal;

  constructor(
    store: OperatorBackend,
    options: EngineSettings,
    logger: Logger,
    events$: Observable<LeaseEvent>,
    track: <T>(work: Promise<T>) => Promise<T>,
  ) {
    this.store = store;
    this.drains = new DrainCache(this.store, logger, track, options.heartbeatIntervalMs);
    if (options.journal) this.journal = new LeaseJournal(this.store, options.owner, logger, events$);
  }

  /** At bootstrap, after the tables are checked: the drains read once, the journal listening. */
  async start(): Promise<void> {
    this.journal?.start();
    await this.drains.start();
  }

  /** At shutdown, before the pool closes: the journal flushed, the drain refresh stopped. Never rejects. */
  async stop(): Promise<void> {
    this.drains.stop();
    await this.journal?.stop();
  }

  /**
   * Refuses a call on a drained key or template (`LeaseDrainedError`). Synchronous while the view of the drains is
   * current; else the drains are read first, and the promise rejects with the refusal (drain-cache.ts).
   */
  admit(targetKey: string, keyTemplate: string): Promise<void> | undefined {
    const reading = this.drains.ready();
    if (reading) return reading.then(() => this.check(targetKey, keyTemplate));
    this.check(targetKey, keyTemplate);
    return undefined;
  }

  private check(targetKey: string, keyTemplate: string): void {
    if (this.drains.active) this.drains.check(targetKey, keyTemplate);
  }

  /** Writes the buffered journal rows now (tests and the console, so a timeline is current). */
  flushJournal(): Promise<void> {
    return this.journal?.flush() ?? Promise.resolve();
  }
}
