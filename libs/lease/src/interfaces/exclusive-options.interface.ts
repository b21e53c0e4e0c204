/** What `@Exclusive` takes and records. */

/** A key template such as `'report:{id}'`, or a function of the method's arguments (after pipes, for handlers). */
export type ExclusiveKey = string | ((...args: any[]) => string);

export interface ExclusiveOptions {
  /** Waits in the priority line (higher first) instead of refusing a busy target. */
  priority?: number;
  /** Waits in line up to this long (priority 0 unless given). */
  waitTimeoutMs?: number;
  /**
   * After release, the target stays taken until this long after the acquisition (database clock): a scheduled job
   * that finishes in milliseconds is not run again by an instance whose timer fires a little later. @default 0
   */
  holdAtLeastMs?: number;
  /**
   * What a busy target does to the call: `'throw'` a `LeaseBusyError`, or `'skip'` — the method does not run, the
   * call resolves `undefined`, `events$` emits `busy` and the log gets at most a debug line (scheduled jobs, event
   * listeners). Not for HTTP handlers, which answer 409. Waiting is chosen by `priority` / `waitTimeoutMs`.
   * `'join'`: the call settles with the outcome of the run holding the target (the same value; an HTTP duplicate
   * answers what the original answers): see `RunOptions.onBusy`.
   * @default 'throw'
   */
  onBusy?: 'throw' | 'skip' | 'join';
  /**
   * Up to this many calls hold the key at once (a semaphore, see `TryAcquireOptions.limit`); not with `sticky` or
   * `onBusy: 'join'`. @default 1
   */
  limit?: number;
  /**
   * Take the target over from a running holder of strictly lower priority (see `AcquireOptions.preempt`; README:
   * "Preemption"). The call waits in line (like a priority) and never joins or skips. @default false
   */
  preempt?: boolean;
  /** With `preempt`: how long the holder may take to release before the takeover. @default preemptGraceMs of the module */
  preemptGraceMs?: number;
  /** With `onBusy: 'join'`: how long to wait for the joined run. @default waitTimeoutMs, else defaultWaitTimeoutMs */
  joinTimeoutMs?: number;
  /**
   * A sticky owner: the first call makes this instance a candidate for the key (leader election); the instance
   * elected keeps the lease across calls (renewed between them) and runs the calls one at a time (one overlapping a
   * running call is busy, or waits with `priority` / `waitTimeoutMs`), the others are busy (`onBusy: 'skip'`: skip)
   * until it dies (lease timeout) or shuts down (released at once, or when its call in progress ends). For `@Cron`
   * jobs: once per tick without `holdAtLeastMs`. A fixed key only (no placeholders, no key function). @default false
   */
  sticky?: boolean;
}

/** What `@Exclusive` records on the method. */
export interface ExclusiveMetadata extends ExclusiveOptions {
  targetKey: ExclusiveKey;
}
