/** Why a lease stopped being ours before we released it. */
export type LeaseLossReason =
  /** A heartbeat found another token on the row (or no row): someone took the lease over. */
  | 'taken-over'
  /** Renewals could not be confirmed before the local safety deadline (leaseTimeoutMs − safetyMarginMs). */
  | 'renewal-deadline'
  /** The lease was released, or the service shut down, before the call completed. */
  | 'released'
  /**
   * The database failed over (or the connection reached a standby): the lease was acquired under another history
   * of the data than the server now serves, so its row may be gone or older than its holder believes.
   */
  | 'failover'
  /**
   * An operator force-released the lease (`LeaseOperator.forceRelease`, the console's action): its grant ended, and
   * an audit row says who, when and why.
   */
  | 'released-by-operator'
  /**
   * A caller of higher priority took the target over (`preempt: true`, docs/preemption.md): told to stop, the
   * holder's lease ends at once (its fenced writes are refused); the row is given back when its work releases it, or
   * taken over regardless after the preemptor's grace.
   */
  | 'preempted';
