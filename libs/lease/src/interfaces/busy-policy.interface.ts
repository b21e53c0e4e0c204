/**
 * What a call does when its key is busy: one busy policy per call (`onBusy`), a discriminated union. The string forms
 * are the object forms with their defaults (`'wait'` is `{ wait: {} }`).
 */

/** Wait in the key's priority line (docs/waiting.md). */
export interface WaitPolicy {
  /**
   * How long to wait in line before a `LeaseWaitTimeoutError`. A non-negative integer, at most 2147483647.
   * @default timing.defaultWaitTimeoutMs of the module
   */
  timeoutMs?: number;
}

/**
 * Settle with the outcome of the run that holds the key — the same value, or a `LeaseJoinedRunError` — instead of
 * running the work again (docs/join.md). The run's value must be JSON.
 */
export interface JoinPolicy {
  /**
   * How long to wait for the joined run before a `LeaseWaitTimeoutError`. A non-negative integer, at most 2147483647.
   * @default timing.defaultWaitTimeoutMs of the module
   */
  timeoutMs?: number;
}

/**
 * Take the key over from a running holder of strictly lower priority (docs/preemption.md): its signal aborts with a
 * `LeaseLostError` of reason `'preempted'`, and this call waits for its release up to `graceMs`, then takes over
 * regardless with a higher fencing token. Never a holder of equal or higher priority, never past a live waiter ahead.
 */
export interface PreemptPolicy {
  /**
   * How long the holder may take to release before the takeover. A non-negative integer (0: at once).
   * @default timing.preemptGraceMs of the module
   */
  graceMs?: number;
  /**
   * How long to wait in line meanwhile (and, when there is nobody to preempt, as `'wait'` does).
   * @default timing.defaultWaitTimeoutMs of the module
   */
  waitTimeoutMs?: number;
}

/**
 * What a busy key does to a call:
 * - `'throw'`: refuse it with a `LeaseBusyError` (HTTP 409 with Retry-After);
 * - `'skip'` (`@Exclusive` and `@Sticky` only): the method does not run, the call resolves `undefined` (a `busy` event);
 * - `'wait'` / `{ wait: WaitPolicy }`: wait in the key's priority line, ranked by the call's `priority`;
 * - `'join'` / `{ join: JoinPolicy }`: settle with the outcome of the run holding the key;
 * - `'preempt'` / `{ preempt: PreemptPolicy }`: take the key over from a holder of lower priority.
 *
 * A semaphore's call (`limit` above 1) cannot join or preempt: its key has several holders. One policy per call: an
 * object names exactly one.
 */
export type BusyPolicy =
  | 'throw'
  | 'skip'
  | 'wait'
  | { wait: WaitPolicy; join?: never; preempt?: never }
  | 'join'
  | { join: JoinPolicy; wait?: never; preempt?: never }
  | 'preempt'
  | { preempt: PreemptPolicy; wait?: never; join?: never };
