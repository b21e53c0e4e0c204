import { catchError, defer, exhaustMap, filter, interval, map, type Observable, of } from 'rxjs';

/** What one heartbeat tick did for its batch. */
export interface HeartbeatTick<M> {
  /** The members renewed by this tick (a snapshot taken when the tick fired). */
  readonly batch: readonly M[];
  /** Monotonic time (performance.now()) when the renewal was sent: a confirmation counts from here. */
  readonly sentAt: number;
  /** Round-trip time of the statement. */
  readonly latencyMs: number;
  /** Ids the database confirmed; absent when the tick failed. */
  readonly kept?: ReadonlySet<string>;
  /** The error of a failed tick (transient until the local deadline; the next tick retries). */
  readonly error?: unknown;
}

/**
 * A batched heartbeat: every `intervalMs`, renews all current members with one call of `renew` and reports which
 * ones the database still confirms. Ticks never overlap: while a renewal is in flight, further ticks are skipped
 * (the local deadline, not this stream, decides when an unconfirmed lease counts as lost). Errors never end the
 * stream: a failed tick is reported and the next tick tries again.
 */
export function batchedHeartbeat<M>(
  intervalMs: number,
  members: () => M[],
  renew: (batch: M[]) => Promise<ReadonlySet<string>>,
): Observable<HeartbeatTick<M>> {
  return interval(intervalMs).pipe(
    map(() => members()),
    filter((batch) => batch.length > 0),
    exhaustMap((batch) => {
      const sentAt = performance.now();
      return defer(() => renew(batch)).pipe(
        map((kept): HeartbeatTick<M> => ({ batch, sentAt, latencyMs: performance.now() - sentAt, kept })),
        catchError((error: unknown) => of<HeartbeatTick<M>>({ batch, sentAt, latencyMs: performance.now() - sentAt, error })),
      );
    }),
  );
}
