/**
 * The opt-in journal of this process's lease events (`journal: true`), which the operator's timeline is drawn from
 * (docs/console.md). Best-effort and off the acquire path: events are buffered in memory (at most
 * `JOURNAL_BUFFER_ROWS`, the oldest dropped beyond, counted in the log) and written in one statement every
 * `JOURNAL_FLUSH_MS`; a failed write is logged and its rows dropped; never a call's failure. Rows older than
 * `JOURNAL_RETENTION_MS` are trimmed, a batch a minute. close() flushes what is buffered, within one statement's bound.
 */
import type { Logger } from '@nestjs/common';
import type { Observable, Subscription } from 'rxjs';
import type { LeaseEvent } from '../interfaces/lease-event.interface.js';
import {
  JOURNAL_BATCH_ROWS,
  JOURNAL_BUFFER_ROWS,
  JOURNAL_FLUSH_MS,
  JOURNAL_RETENTION_MS,
  JOURNAL_TRIM_INTERVAL_MS,
} from '../options/bounds.js';
import type { JournalRow, OperatorBackend } from '../core/backend.js';

/** The journal row of an event worth a timeline point, or null. */
export function journalRowOf(event: LeaseEvent, owner: string): JournalRow | null {
  const row = (targetKey: string, keyTemplate: string, fencingToken: bigint | null, detail: string | null) => ({
    at: event.at,
    targetKey,
    keyTemplate,
    type: event.type,
    owner,
    fencingToken,
    detail,
  });
  switch (event.type) {
    case 'acquired':
      return row(event.targetKey, event.keyTemplate, event.fencingToken, null);
    case 'taken-over':
      return row(event.targetKey, event.keyTemplate, event.fencingToken, `from ${event.previousOwner ?? 'unknown'}`);
    case 'lost':
      return row(event.targetKey, event.keyTemplate, event.fencingToken, event.reason);
    case 'released':
      return row(event.targetKey, event.keyTemplate, event.fencingToken, `held ${Math.round(event.heldMs)} ms`);
    case 'waiting':
      return row(event.targetKey, event.keyTemplate, null, `priority ${event.priority}`);
    case 'wait-ended':
      return row(event.targetKey, event.keyTemplate, null, `${event.outcome} after ${Math.round(event.waitedMs)} ms`);
    default:
      return null;
  }
}

export class LeaseJournal {
  private buffer: JournalRow[] = [];
  private dropped = 0;
  private subscription?: Subscription;
  private timer?: NodeJS.Timeout;
  private flushing?: Promise<void>;
  private lastTrim = performance.now();
  private missing = false;

  constructor(
    private readonly store: OperatorBackend,
    private readonly owner: string,
    private readonly logger: Logger,
    private readonly events$: Observable<LeaseEvent>,
  ) {}

  start(): void {
    if (this.subscription) return;
    this.subscription = this.events$.subscribe((event) => {
      const row = journalRowOf(event, this.owner);
      if (!row || this.missing) return;
      if (this.buffer.length >= JOURNAL_BUFFER_ROWS) {
        this.buffer.shift();
        this.dropped++;
      }
      this.buffer.push(row);
    });
    this.timer = setInterval(() => void this.flush(), JOURNAL_FLUSH_MS);
    this.timer.unref();
  }

  /** Stops journaling and writes what is buffered (bounded by the statement's bound; never rejects). */
  async stop(): Promise<void> {
    this.subscription?.unsubscribe();
    this.subscription = undefined;
    clearInterval(this.timer);
    await this.flush();
  }

  /** Writes the buffered rows (one batch per statement) and, once a minute, trims old rows. Never rejects. */
  flush(): Promise<void> {
    this.flushing ??= this.write().finally(() => (this.flushing = undefined));
    return this.flushing;
  }

  private async write(): Promise<void> {
    try {
      if (this.dropped > 0) {
        this.logger.warn(`Journal: ${this.dropped} event(s) dropped (the buffer was full)`);
        this.dropped = 0;
      }
      while (this.buffer.length > 0) {
        const batch = this.buffer.splice(0, JOURNAL_BATCH_ROWS);
        await this.store.writeJournal(batch);
      }
      if (performance.now() - this.lastTrim >= JOURNAL_TRIM_INTERVAL_MS) {
        this.lastTrim = performance.now();
        await this.store.trimJournal(JOURNAL_RETENTION_MS, JOURNAL_BATCH_ROWS);
      }
    } catch (error) {
      this.buffer = [];
      if (this.store.missingTable(error)) this.missing = true;
      this.logger.warn(`Journal: a write failed, its rows are dropped: ${String(error)}`);
    }
  }
}
