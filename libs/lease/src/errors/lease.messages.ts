/**
 * Every message of the library, in one place, so the wording (and its advice) can be read and kept consistent:
 * the errors' messages (the classes are the API, the wording may improve) and the log lines' texts. Private.
 */
import type { LeaseLossReason } from '../interfaces/lease-loss-reason.interface.js';

const lossCauses: Record<LeaseLossReason, string> = {
  'taken-over': 'another holder took it over',
  'renewal-deadline': 'its renewals could not be confirmed before the safety deadline',
  released: 'it was already released',
  failover: 'the database failed over since it was acquired',
};

/** The messages, by what they are about. */
export const messages = {
  busy: (targetKey: string) =>
    `Target "${targetKey}" is leased by another holder: try again later, or pass a priority or waitTimeoutMs to wait ` +
    'in line',
  queueFull: (targetKey: string, detail: string) => `Cannot wait for "${targetKey}": ${detail}`,
  /**
   * Fencing guarantees one thing: this lease's fenced writes are refused from now on. Work done outside a fenced
   * write (a call to another system, a file) was not prevented, so the message does not claim it.
   */
  lost: (targetKey: string, reason: LeaseLossReason, detail?: string) =>
    `Lease on "${targetKey}" was lost (${lossCauses[reason]}${detail ? `: ${detail}` : ''}): its fenced writes are ` +
    'refused (a refused fenced write committed nothing); work done outside fenced writes was not undone — make it ' +
    'idempotent or fence it with lease.fencingToken',
  waitTimeout: (targetKey: string, waitTimeoutMs: number) =>
    `Gave up waiting for "${targetKey}" after ${waitTimeoutMs} ms: raise waitTimeoutMs or the priority, or try later`,
  readOnly: (targetKey: string | undefined, detail: string) =>
    `No lease${targetKey === undefined ? '' : ` on "${targetKey}"`} can be granted now: the database server ` +
    `accepts no writes (${detail}) — a standby in recovery, or a failover under way. Point the application at the ` +
    "primary (a multi-host URL with target_session_attrs=read-write, or the cluster's read-write endpoint), then retry",
  databaseFailing: (targetKey: string | undefined, operation: string, detail: string) =>
    `Could not ${operation}${targetKey === undefined ? '' : ` "${targetKey}"`}: the database is unreachable or ` +
    `failing (${detail}). Transient: retry later; if it lasts, check the database and the connection settings`,
  shutdown: (what: 'leases' | 'waits' | 'cancelled') =>
    what === 'cancelled'
      ? 'LeaseService is shutting down: the wait was cancelled (its waiter row is removed)'
      : `LeaseService is shut down: no new ${what} (the application is closing; acquire before shutdown begins)`,
  waitTimeoutArgument: (got: unknown) =>
    `waitTimeoutMs must be a non-negative integer of at most 2147483647 (about 24.8 days), got ${String(got)}`,
  holdArgument: (got: unknown) =>
    'holdAtLeastMs must be a non-negative integer number of milliseconds (at most 2147483647), got ' +
    (typeof got === 'string' ? JSON.stringify(got) : String(got)),
  priorityArgument: (got: unknown) =>
    `priority must be an integer between -2147483648 and 2147483647, got ${String(got)}`,
  sequenceExhausted: (sequence: string) =>
    `The sequence ${sequence} has passed 2^40 (or the server's timeline 2^23): nest-pg-lease refuses to hand out ` +
    'numbers that would overflow into the timeline bits of its fencing tokens, and nothing was written. Tokens ' +
    'cannot grow further in these tables: move to new ones (tableName, waiterTableName) and let downstream systems ' +
    'that compare fencing tokens start afresh; see the README section "Failover" (fencing token layout)',
  batchOutOfOrder: (index: number) =>
    `nest-pg-lease: a batch answered out of order at row ${index} (a bug: please report it)`,
};

/** An error (or any thrown value) as one line of a log message. */
export function errorText(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return typeof error === 'string' ? error : (JSON.stringify(error) ?? typeof error);
}
