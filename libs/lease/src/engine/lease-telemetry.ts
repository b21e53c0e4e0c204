/**
 * What the engine tells about its calls besides their results: the OpenTelemetry spans (`lease.acquire`,
 * `lease.wait`, `lease.fenced`, `lease.release`; see observability/tracing.ts — nothing is built without an SDK) and
 * the timing events (`acquire-ended`, `wait-ended`) that the metrics are made of. The engine calls it around each
 * step; it never changes a step's outcome.
 */
import diagnostics from 'node:diagnostics_channel';
import { waitEndedEvent } from './lease-events.js';
import { LEASE_CHANNELS } from '../lease.constants.js';
import {
  LeaseDrainedError,
  LeaseLostError,
  LeaseQueueFullError,
  LeaseShutdownError,
  LeaseUnavailableError,
  LeaseWaitTimeoutError,
} from '../errors/lease.errors.js';
import type { Lease } from '../interfaces/lease.interface.js';
import type { AcquireOutcome, LeaseEvent } from '../interfaces/lease-event.interface.js';
import type { EngineSettings } from '../options/engine-settings.js';
import { holderSpan, type LeaseSpan, type SpanAttributes, startSpan, tracing } from '../observability/tracing.js';
import type { LeaseBackend } from '../core/backend.js';
import { HeldLease } from './held-lease.js';
import type { Waiter } from './wait-queue.js';

/** What a span and a timing event say of a call. */
export interface TracedCall {
  readonly targetKey: string;
  readonly priority: number;
  readonly keyTemplate: string;
}

export class LeaseTelemetry {
  constructor(
    private readonly options: Pick<EngineSettings, 'traceTargetKeys'>,
    private readonly backend: Pick<LeaseBackend, 'snapshot'>,
    private readonly emit: (event: LeaseEvent) => void,
    /** Tracks background work for close() (the engine's `track`). */
    private readonly track: <T>(work: Promise<T>) => Promise<T>,
  ) {}

  /**
   * The diagnostics channel of `acquire-ended`: with no subscriber there, no span recording and no `events$`
   * subscriber, the engine does not call `acquire` at all (a property read, no call: see `LeaseEngine.acquiring`).
   */
  readonly acquireEnded = diagnostics.channel(LEASE_CHANNELS['acquire-ended']);

  /**
   * One call's acquisition in a `lease.acquire` span, child of the caller's active span (when an SDK records): its
   * outcome, fencing token and the batch its statement went in; a wait in line is its child `lease.wait`. The
   * caller's span is kept on the lease: heartbeat failures and the loss become its events. Ends with `acquire-ended`.
   */
  acquire<T extends Lease | null>(
    call: TracedCall,
    work: () => Promise<T>,
    signal: AbortSignal | undefined,
    { traced, timed }: { traced: boolean; timed: boolean },
  ): Promise<T> {
    const holder = traced ? holderSpan() : undefined;
    const span = traced
      ? startSpan('lease.acquire', {
          ...this.attributes(call.targetKey, call.keyTemplate),
          'lease.priority': call.priority,
        })
      : undefined;
    const started = performance.now();
    const ended = (outcome: AcquireOutcome) => {
      if (!timed) return;
      this.emit({
        type: 'acquire-ended',
        targetKey: call.targetKey,
        keyTemplate: call.keyTemplate,
        priority: call.priority,
        outcome,
        durationMs: performance.now() - started,
        at: new Date(),
      });
    };
    return (span ? span.within(work) : work()).then(
      (lease) => {
        const outcome = lease instanceof HeldLease && lease.tookOver ? 'taken-over' : lease ? 'acquired' : 'busy';
        if (lease instanceof HeldLease) lease.holder = holder;
        if (lease) span?.set({ 'lease.fencing_token': String(lease.fencingToken) });
        span?.end(outcome);
        ended(outcome);
        return lease;
      },
      (error: unknown) => {
        const outcome = failureOf(error, signal);
        span?.end(outcome, outcome === 'error' || outcome === 'unavailable' ? error : undefined);
        ended(outcome);
        throw error;
      },
    );
  }

  /** A wait in line (`work`) in a `lease.wait` span with the waiter's position; ends with `wait-ended`. */
  async wait(call: TracedCall, waiter: Waiter, work: () => Promise<Lease>, signal?: AbortSignal): Promise<Lease> {
    const started = performance.now();
    const span = startSpan('lease.wait', {
      ...this.attributes(call.targetKey, call.keyTemplate),
      'lease.priority': call.priority,
    });
    if (span) this.position(span, waiter);
    try {
      const granted = await (span ? span.within(work) : work());
      this.waitEnded(call, 'granted', started);
      span?.set({ 'lease.fencing_token': String(granted.fencingToken) });
      span?.end('granted');
      return granted;
    } catch (error) {
      const outcome = signal?.aborted ? 'aborted' : error instanceof LeaseWaitTimeoutError ? 'timeout' : 'error';
      this.waitEnded(call, outcome, started);
      span?.end(outcome, outcome === 'error' ? error : undefined);
      throw error;
    }
  }

  /** A `fenced()` transaction in a `lease.fenced` span. */
  fenced<T>(lease: HeldLease, work: () => Promise<T>): Promise<T> {
    if (!tracing()) return work();
    const span = startSpan('lease.fenced', {
      ...this.attributes(lease.targetKey, lease.keyTemplate),
      'lease.fencing_token': String(lease.fencingToken),
    });
    if (!span) return work();
    return span.within(work).then(
      (result) => {
        span.end('committed');
        return result;
      },
      (error: unknown) => {
        span.end(error instanceof LeaseLostError ? 'lost' : 'error', error);
        throw error;
      },
    );
  }

  /** A release (`work` resolves whether it was confirmed) in a `lease.release` span. */
  async release(lease: HeldLease, heldMs: number, work: () => Promise<boolean>): Promise<void> {
    if (!tracing()) {
      await work();
      return;
    }
    const span = startSpan('lease.release', {
      ...this.attributes(lease.targetKey, lease.keyTemplate),
      'lease.fencing_token': String(lease.fencingToken),
      'lease.held_ms': Math.round(heldMs),
    });
    const released = await (span ? span.within(work) : work());
    // Not confirmed: the statement failed (retried in the background) or found another token.
    span?.end(released ? 'released' : 'not-confirmed');
  }

  /** The attributes every span of a lease carries: its template, and its key only when `traceTargetKeys` is on. */
  private attributes(targetKey: string, keyTemplate: string): SpanAttributes {
    return { 'lease.key_template': keyTemplate, 'lease.key': this.options.traceTargetKeys ? targetKey : undefined };
  }

  /**
   * `lease.wait.position` of a traced wait: the waiter's place among the live waiters of its target (1 = granted
   * next), read with one snapshot statement in parallel with the wait — only when a span records it.
   */
  private position(span: LeaseSpan, waiter: Waiter): void {
    const seq = waiter.place?.seq;
    if (seq === undefined) return;
    const reading = this.backend.snapshot(waiter.targetKey).then((rows) => {
      let position = 0;
      for (const row of rows) {
        if (row.state !== 'waiting' || row.since_heartbeat_ms >= row.timeout_ms) continue;
        position++;
        if (row.seq === String(seq)) return span.set({ 'lease.wait.position': position });
      }
    });
    void this.track(reading).catch(() => undefined);
  }

  private waitEnded(
    { targetKey, keyTemplate, priority }: TracedCall,
    outcome: 'granted' | 'timeout' | 'aborted' | 'error',
    started: number,
  ): void {
    this.emit(waitEndedEvent({ targetKey, keyTemplate, priority }, outcome, performance.now() - started));
  }
}

/** The `lease.outcome` of an acquisition that failed. */
function failureOf(error: unknown, signal?: AbortSignal): AcquireOutcome {
  if (signal?.aborted) return 'aborted';
  if (error instanceof LeaseDrainedError) return 'drained';
  if (error instanceof LeaseWaitTimeoutError) return 'timeout';
  if (error instanceof LeaseQueueFullError) return 'queue-full';
  if (error instanceof LeaseShutdownError) return 'shutdown';
  if (error instanceof LeaseUnavailableError) return 'unavailable';
  return 'error';
}
