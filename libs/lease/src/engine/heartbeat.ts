import { catchError, defer, exhaustMap, filter, interval, map, type Observable, of } from 'rxjs';

/**
 * What one renewal reported: the ids the database confirmed, and those it could not judge this time (`skipped`, say
 * a row locked by a transaction of our own) or found expired (`expired`). A plain set means "these were confirmed".
 */
export type RenewOutcome =
  | ReadonlySet<string>
  | {
      readonly kept: ReadonlySet<string>;
      readonly skipped?: ReadonlySet<string>;
      readonly expired?: ReadonlySet<string>;
      /** Ids acquired under another history of the database than the server now has (a failover): lost. */
      readonly failover?: ReadonlySet<string>;
      /** Ids whose lease an operator force-released: not renewed, lost (`released-by-operator`). */
      readonly forced?: ReadonlySet<string>;
      /** Ids a preempting caller asked to stop, or took over: lost (`preempted`). */
      readonly preempted?: ReadonlySet<string>;
    };

/** What one heartbeat tick did for its batch. */
export interface HeartbeatTick<M> {
  /** The members renewed by this tick (a snapshot taken when the tick fired). */
  readonly batch: readonly M[];
  /** Monotonic time (performance.now()) when the renewal was sent: a confirmation counts from here. */
  readonly sentAt: number;
  /** Round-trip time of the renewal. */
  readonly latencyMs: number;
  /** Ids the database confirmed; absent when the tick failed. */
  readonly kept?: ReadonlySet<string>;
  /** Ids neither confirmed nor lost by this tick: the local deadline, not this tick, decides about them. */
  readonly skipped?: ReadonlySet<string>;
  /** Ids whose row had already expired (database clock): not renewed, and never revived. */
  readonly expired?: ReadonlySet<string>;
  /** Ids acquired under another history of the database (a failover): not renewed, lost. */
  readonly failover?: ReadonlySet<string>;
  /** Ids whose lease an operator force-released: not renewed, lost (`released-by-operator`). */
  readonly forced?: ReadonlySet<string>;
  /** Ids a preempting caller asked to stop, or took over: lost (`preempted`). */
  readonly preempted?: ReadonlySet<string>;
  /** The error of a failed tick (transient until the local deadline; the next tick retries). */
  readonly error?: unknown;
}

const NONE: ReadonlySet<string> = new Set();

/**
 * A batched heartbeat: every `intervalMs`, renews all current members with one call of `renew` and reports which
 * ones the database still confirms. Ticks never overlap: while a renewal is in flight, further ticks are skipped
 * (the local deadline, not this stream, decides when an unconfirmed lease counts as lost). Errors never end the
 * stream: a failed tick is reported and the next tick tries again.
 */
export function batchedHeartbeat<M>(
  intervalMs: number,
  members: () => M[],
  renew: (batch: M[]) => Promise<RenewOutcome>,
): Observable<HeartbeatTick<M>> {
  return interval(intervalMs).pipe(
    map(() => members()),
    filter((batch) => batch.length > 0),
    exhaustMap((batch) => renewTick(batch, renew)),
  );
}

/** One renewal of `batch`, as a heartbeat tick (never rejecting: a failure is the tick's `error`). */
export function renewTick<M>(batch: M[], renew: (batch: M[]) => Promise<RenewOutcome>): Observable<HeartbeatTick<M>> {
  const sentAt = performance.now();
  return defer(() => renew(batch)).pipe(
    map((outcome): HeartbeatTick<M> => {
      const latencyMs = performance.now() - sentAt;
      if (outcome instanceof Set) return { batch, sentAt, latencyMs, kept: outcome };
      const {
        kept,
        skipped = NONE,
        expired = NONE,
        failover = NONE,
        forced = NONE,
        preempted = NONE,
      } = outcome as Exclude<RenewOutcome, ReadonlySet<string>>;
      return { batch, sentAt, latencyMs, kept, skipped, expired, failover, forced, preempted };
    }),
    catchError((error: unknown) =>
      of<HeartbeatTick<M>>({ batch, sentAt, latencyMs: performance.now() - sentAt, error }),
    ),
  );
}
