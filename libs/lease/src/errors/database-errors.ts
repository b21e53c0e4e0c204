/**
 * The one classifier of database errors (pglock's `typedError`): what a SQLSTATE, a `pg` error or a network error
 * means for the library — retry the statement, split the batch, report the database unavailable, or name the
 * configuration to change. Every other file asks here instead of reading error codes.
 */
import { types } from 'node:util';
import { LeaseConfigError, LeaseError, LeaseUnavailableError } from './lease.errors.js';
import { messages } from './lease.messages.js';

/** The SQLSTATE of a server error, if `error` carries one. */
function sqlState(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/**
 * SQLSTATEs after which one of our single statements can simply run again: PostgreSQL rolled it back whole. Under
 * `default_transaction_isolation = serializable` (or repeatable read) concurrent acquisitions of one key raise
 * 40001; the statements are correct under READ COMMITTED's row locks, so a fresh attempt is all they need.
 */
const RETRYABLE_SQLSTATES = new Set(['40001', '40P01']);

/** A serialization failure or deadlock: the statement (or transaction) was rolled back whole. */
export function isSerializationFailure(error: unknown): boolean {
  const code = sqlState(error);
  return code !== undefined && RETRYABLE_SQLSTATES.has(code);
}

/**
 * A prepared statement the server no longer knows (26000): the application ran `DEALLOCATE` or `DISCARD ALL` on a
 * connection of its DataSource where a fenced transaction had prepared its statements. The exchange that met it has
 * forgotten the library's names on that connection (database/exchange.ts): sent again, they are prepared again.
 */
export function isForgottenStatement(error: unknown): boolean {
  return sqlState(error) === '26000';
}

/**
 * Whether the first step of a fenced transaction (BEGIN with the row lock, before any statement of the work) may
 * simply start again: a serialization failure or deadlock, or a prepared statement the server no longer knows.
 */
export function isLockStepRetryable(error: unknown): boolean {
  return isSerializationFailure(error) || isForgottenStatement(error);
}

/**
 * A statement error after which the statement provably wrote nothing and can be sent again in parts: PostgreSQL
 * answered with an ERROR (it has a SQLSTATE) other than the connection and operator classes (08, 57: the outcome of a
 * COMMIT may be unknown there). Client-side timeouts and network errors have no SQLSTATE: never split.
 */
export function isStatementError(error: unknown): boolean {
  const code = sqlState(error);
  if (code === undefined || !/^[0-9A-Z]{5}$/.test(code)) return false;
  return !code.startsWith('08') && !code.startsWith('57');
}

/**
 * A setting the server does not know (42704: PostgreSQL 13 has no `client_connection_check_interval`) or refuses
 * for this platform (22023: one without POLLRDHUP accepts only 0).
 */
export function isUnsupportedSetting(error: unknown): boolean {
  const code = sqlState(error);
  return code === '42704' || code === '22023';
}

/** A statement refused because the role may not call `pg_control_system()`. */
export function systemIdRefused(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: string; message?: string };
  return code === '42501' && /pg_control_system/.test(message ?? '');
}

/**
 * The server refused the WAL functions of the timeline: no EXECUTE right (42501), or not supported at all (0A000:
 * Aurora PostgreSQL without logical replication).
 */
export function walFunctionsRefused(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: string; message?: string };
  return (code === '42501' || code === '0A000') && /pg_current_wal_lsn|pg_walfile_name/.test(message ?? '');
}

/** The error of a statement that drew a number past the 40 bits of `historyOrdered` for `column`. */
export function exhausted(error: unknown, column: string, sequence: string): LeaseConfigError | undefined {
  const { code, column: failed } = (error ?? {}) as { code?: string; column?: string };
  if (code !== '23502' || failed !== column) return undefined;
  return new LeaseConfigError(messages.sequenceExhausted(sequence), { cause: error });
}

/**
 * A write refused because the server accepts no writes: a standby in recovery (the application reached a replica,
 * or a failover is under way), or a server set read-only.
 */
export function readOnly(error: unknown, targetKey: string): LeaseUnavailableError | undefined {
  const { code, message } = (error ?? {}) as { code?: string; message?: string };
  const recovery = code === '55000' && /recovery is in progress/.test(message ?? '');
  if (code !== '25006' && !recovery) return undefined;
  return new LeaseUnavailableError(targetKey, String(message), { cause: error });
}

/**
 * Whether `error` is an Error of any realm. Node's own errors (a socket's ECONNREFUSED) are made in the main realm;
 * code running in a vm context — a user's Jest suite, where the library is loaded in the sandbox — has Errors of its
 * own, so `instanceof Error` is false for them there, and a refused connection escaped as the driver's error.
 */
function isAnyError(error: unknown): error is Error {
  return error instanceof Error || types.isNativeError(error);
}

/**
 * A failure of the database or of the connection to it, as opposed to a bug: a server error (a SQLSTATE), a socket
 * error (an errno code such as ECONNREFUSED), or one of `pg`'s connection failures (terminated, timed out).
 */
export function isDatabaseFailure(error: unknown): boolean {
  if (error instanceof LeaseError || !isAnyError(error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && code.length > 0) return true;
  return /connection|terminated|timeout|timed out|ECONN|EPIPE|socket/i.test(error.message);
}

/**
 * What a database failure says: its message, else its code (Node's refusal of every address of a host is an
 * AggregateError with a code and no message).
 */
function failureDetail(error: unknown): string {
  if (!isAnyError(error)) return String(error);
  const code = (error as { code?: unknown }).code;
  return error.message || (typeof code === 'string' ? code : error.name);
}

/** `error` as a `LeaseUnavailableError` when it is a database failure; anything else unchanged. */
export function unavailableOr(error: unknown, targetKey: string | undefined, operation: string): unknown {
  if (!isDatabaseFailure(error)) return error;
  return new LeaseUnavailableError(targetKey, failureDetail(error), { cause: error, kind: 'failing', operation });
}
