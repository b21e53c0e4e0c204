/**
 * The client-facing option of the calls that may be refused (`run`, `@Exclusive`). `RefusableCallOptions` is not
 * exported by the package's entry point (`RunOptions` and `ExclusiveOptions` carry it); `RetryAfterContext` is, through
 * acquire-options.interface.ts.
 */

/** What a `retryAfterMs` function is told (`RunOptions`, `ExclusiveOptions`). */
export interface RetryAfterContext {
  /** The key the call was refused. */
  readonly targetKey: string;
  /**
   * The library's estimate of when the key is free, in milliseconds, at least 1000 and at most
   * `timing.leaseTimeoutMs`: what is left of a hold tail, else the key's typical hold as this process saw it (minus its
   * holder's age when this process holds it), else 5000 (docs/errors-and-http.md, "Retry-After").
   */
  readonly estimatedMs: number;
}

/** What a call that may be refused tells its client (`run`, `@Exclusive`). */
export interface RefusableCallOptions {
  /**
   * When the client of a refused call — a `LeaseBusyError`: the key busy, or every slot of a semaphore held — may
   * try again, in milliseconds: the error's `retryAfterMs`, sent over HTTP as `Retry-After` (whole seconds, at least
   * 1). A non-negative integer, or a function of the library's estimate (`({ estimatedMs }) => 2 * estimatedMs`); a
   * function that returns no non-negative number leaves the estimate. @default the library's estimate
   */
  retryAfterMs?: number | ((context: RetryAfterContext) => number);
}

/** A call's `retryAfterMs`: milliseconds, or a function of the library's estimate. */
export type RetryAfter = NonNullable<RefusableCallOptions['retryAfterMs']>;
