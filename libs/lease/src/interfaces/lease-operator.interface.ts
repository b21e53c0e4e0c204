/** What the operator's API (`LeaseOperator`) and the console take and return (docs/console.md). */

/** Who acts and why: both recorded in the audit row (1–1000 characters each). */
export interface OperatorAction {
  /** The operator (a user name, an e-mail, a service account): whoever the app's guard authenticated. */
  by: string;
  reason: string;
}

/** A drain in force: no new acquisition of the key (or of any key of the template) is granted. */
export interface DrainEntry {
  kind: 'key' | 'template';
  /** The target key, or the key template (`report:{userId}`, what `@Exclusive` and `keyTemplate` name). */
  subject: string;
  actor: string;
  reason: string;
  /** When it was put in force (database clock). */
  at: Date;
}

/** What `LeaseOperator.forceRelease` did. */
export interface ForceReleaseResult {
  /** False when nobody held the key (the audit row is written anyway). */
  released: boolean;
  /** The owner (process identity) whose grant ended. */
  holder?: string;
  /** The fencing token of the grant that ended. */
  fencingToken?: bigint;
  /** When the audit row was written (database clock). */
  at: Date;
}

/** One row of the audit trail. */
export interface OperatorAuditEntry {
  /** Increasing with each action (a decimal string). */
  id: string;
  at: Date;
  action: 'force-release' | 'drain' | 'undrain';
  kind: 'key' | 'template';
  subject: string;
  actor: string;
  reason: string;
  /** force-release: the grant that ended. */
  fencingToken?: bigint;
  /** force-release: its holder. */
  holder?: string;
}

/**
 * One point of a key's timeline (`LeaseOperator.history`): a lease event journaled by the process it happened in
 * (`journal: true`), or an operator's force-release (from the audit trail).
 */
export interface TimelineEntry {
  /** Journal rows: the clock of the process that journaled them; force-releases: the database clock. */
  at: Date;
  type: 'acquired' | 'taken-over' | 'lost' | 'released' | 'waiting' | 'wait-ended' | 'force-release';
  /** The process (its `owner`), or for a force-release the operator. */
  owner: string;
  fencingToken?: bigint;
  /** lost: the reason; taken-over: the previous owner; wait-ended: outcome and wait; force-release: the reason. */
  detail?: string;
}
