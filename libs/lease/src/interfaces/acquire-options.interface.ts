/** Options of `LeaseService.tryAcquire()`. */
export interface TryAcquireOptions {
  /** Higher is served first. Giving it (or waitTimeoutMs) makes `acquire`/`run` wait in line. @default 0 */
  priority?: number;
  /**
   * The target stays taken until this long after the acquisition (database clock), even once released — with no
   * heartbeat for that tail. For jobs that must run once per tick across instances (ShedLock's `lockAtLeastFor`):
   * an instance whose timer fires a few milliseconds late finds the target still taken. A non-negative integer, at
   * most 2147483647. @default 0
   */
  holdAtLeastMs?: number;
  /**
   * What the key is an instance of, e.g. `'report:{userId}'` for `report:42`: the `lease.key_template` attribute of
   * the call's spans (and the `key_template` label of its metrics). Never the key itself: it names a kind of work, so
   * traces group and metrics keep few series. `@Exclusive` sets it to its key template (or `Class.method` for a key
   * function). @default '(none)'
   */
  keyTemplate?: string;
  /**
   * How many may hold the key at once (a semaphore; README "Semaphores: N holders per key"): each holder gets a slot,
   * a lease of its own (token, fencing token, heartbeat, `fenced()`), and the (limit + 1)-th caller is refused or
   * waits in the key's one priority line. Every caller of a key must ask the same limit (`LeaseLimitConflictError`).
   * An integer from 1 to 1000; 1 is the single-holder lease. @default 1
   */
  limit?: number;
}

/** Options of `LeaseService.acquire()` and `run()`. */
export interface AcquireOptions extends TryAcquireOptions {
  /** How long to wait in line. @default defaultWaitTimeoutMs of the module */
  waitTimeoutMs?: number;
  /** Aborts the wait (the rejection is the signal's reason); the waiter row is removed first. */
  signal?: AbortSignal;
  /**
   * Take the target over from a running holder of strictly lower priority (README: "Preemption"): its signal aborts
   * with a `LeaseLostError` of reason `'preempted'`, and this call waits for its release up to `preemptGraceMs`,
   * then takes over regardless with a higher fencing token (the holder's fenced writes are refused from then on).
   * Never a holder of equal or higher priority, and never past a live waiter ahead in line. Waits in line like
   * `acquire` (up to `waitTimeoutMs`). @default false
   */
  preempt?: boolean;
  /** With `preempt`: how long the holder may take to release before the takeover. @default preemptGraceMs of the module */
  preemptGraceMs?: number;
}

/** What a busy target does to a `run`: refuse it (`'throw'`) or settle with the outcome of the run holding it. */
export type RunOnBusy = 'throw' | 'join';

/** Options of `LeaseService.run()`. */
export interface RunOptions extends AcquireOptions {
  /**
   * `'join'`: when the target is held by a run of the same key, wait for that run and settle with its outcome — the
   * same value, or a `LeaseJoinedRunError` — instead of acquiring (see the README, "Joining the running call"). The
   * value must be JSON (a `LeaseArgumentError` otherwise). A join attempts once: it never waits in the priority line.
   * @default 'throw'
   */
  onBusy?: RunOnBusy;
  /** How long a join waits for the run it joined (a `LeaseWaitTimeoutError` after). @default waitTimeoutMs, else defaultWaitTimeoutMs */
  joinTimeoutMs?: number;
}
