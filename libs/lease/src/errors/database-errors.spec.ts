import { runInNewContext } from 'node:vm';
import { LeaseConfigError, LeaseUnavailableError, LeaseBusyError } from './lease.errors.js';
import {
  exhausted,
  isDatabaseFailure,
  isSerializationFailure,
  isStatementError,
  isUnsupportedSetting,
  readOnly,
  systemIdRefused,
  unavailableOr,
  walFunctionsRefused,
} from './database-errors.js';

const pgError = (code: string, message = 'server error', extra: Record<string, unknown> = {}) =>
  Object.assign(new Error(message), { code, ...extra });

/** The one classifier of database errors: what each SQLSTATE, pg error or network error means for the library. */
describe('database error classification', () => {
  it.each([
    ['40001', true],
    ['40P01', true],
    ['23505', false],
    ['57014', false],
  ])('SQLSTATE %s is a serialization failure (retried): %p', (code, expected) => {
    expect(isSerializationFailure(pgError(code))).toBe(expected);
  });

  it('values without a code are never serialization failures', () => {
    for (const value of [null, undefined, 'x', new Error('timeout'), { code: 40001 }]) {
      expect(isSerializationFailure(value)).toBe(false);
    }
  });

  it.each([
    ['P0001', true],
    ['23502', true],
    ['55P03', true],
    ['08006', false],
    ['57P01', false],
    ['ECONNRESET', false],
  ])('a batch failing with %s is split (the statement wrote nothing): %p', (code, expected) => {
    expect(isStatementError(pgError(code))).toBe(expected);
  });

  it('a client-side timeout (no SQLSTATE) never splits a batch', () => {
    expect(isStatementError(new Error('Query read timeout'))).toBe(false);
  });

  it('42704 and 22023 are settings the server cannot take; anything else is not', () => {
    expect(isUnsupportedSetting(pgError('42704'))).toBe(true);
    expect(isUnsupportedSetting(pgError('22023'))).toBe(true);
    expect(isUnsupportedSetting(pgError('42501'))).toBe(false);
  });

  it('a refused pg_control_system() is told apart from other permission errors', () => {
    expect(systemIdRefused(pgError('42501', 'permission denied for function pg_control_system'))).toBe(true);
    expect(systemIdRefused(pgError('42501', 'permission denied for table job_lease'))).toBe(false);
    expect(systemIdRefused(undefined)).toBe(false);
  });

  it('the WAL functions refused (no right, or not supported as on Aurora) are told apart from other errors', () => {
    expect(walFunctionsRefused(pgError('42501', 'permission denied for function pg_walfile_name'))).toBe(true);
    const aurora = 'Function pg_current_wal_lsn() is currently not supported for Aurora';
    expect(walFunctionsRefused(pgError('0A000', aurora))).toBe(true);
    expect(walFunctionsRefused(pgError('42501', 'permission denied for table job_lease'))).toBe(false);
    expect(walFunctionsRefused(pgError('55000', 'recovery is in progress'))).toBe(false);
    expect(walFunctionsRefused(undefined)).toBe(false);
  });

  it('a NOT NULL violation of the token column is the exhausted sequence, as a LeaseConfigError with the cause', () => {
    const cause = pgError('23502', 'null value', { column: 'fencing_token' });
    const error = exhausted(cause, 'fencing_token', '"public"."job_lease_fencing_seq"');
    expect(error).toBeInstanceOf(LeaseConfigError);
    expect(error?.message).toMatch(/^The sequence "public"\."job_lease_fencing_seq" has passed 2\^47/);
    expect(error?.cause).toBe(cause);
    expect(exhausted(cause, 'seq', 's')).toBeUndefined();
    expect(exhausted(pgError('23505', 'x', { column: 'fencing_token' }), 'fencing_token', 's')).toBeUndefined();
  });

  it('a read-only server (25006, or 55000 in recovery) is a LeaseUnavailableError for the key', () => {
    const standby = readOnly(pgError('25006', 'cannot execute INSERT in a read-only transaction'), 'k');
    expect(standby).toBeInstanceOf(LeaseUnavailableError);
    expect(standby?.targetKey).toBe('k');
    expect(readOnly(pgError('55000', 'recovery is in progress'), 'k')).toBeInstanceOf(LeaseUnavailableError);
    expect(readOnly(pgError('55000', 'object not in prerequisite state'), 'k')).toBeUndefined();
    expect(readOnly(pgError('23505'), 'k')).toBeUndefined();
  });

  it.each<[string, unknown, boolean]>([
    ['a server error', pgError('53300', 'too many connections'), true],
    ['a socket error', Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }), true],
    ['a pg connection failure', new Error('Connection terminated unexpectedly'), true],
    ['a client timeout', new Error('Query read timeout'), true],
    ['a bug', new TypeError('x is not a function'), false],
    ['a lease error', new LeaseBusyError('k', 1), false],
    ['not an Error', 'boom', false],
  ])('%s is a database failure: %p', (_, error, expected) => {
    expect(isDatabaseFailure(error)).toBe(expected);
  });

  it('an error of another realm is classified like any other (Node core errors under Jest, a vm, a worker)', () => {
    // Node's own errors (the socket's ECONNREFUSED) come from the main realm; code run in a vm context (a user's Jest
    // suite) has Errors of its own, so `instanceof Error` is false for them there.
    const foreign = runInNewContext(
      `Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })`,
    ) as unknown;
    expect(foreign instanceof Error).toBe(false);
    expect(isDatabaseFailure(foreign)).toBe(true);
    const failure = unavailableOr(foreign, 'k', 'acquire a lease on');
    expect(failure).toBeInstanceOf(LeaseUnavailableError);
    expect((failure as Error).message).toMatch(/connect ECONNREFUSED 127\.0\.0\.1:5432/);
    expect((failure as Error).cause).toBe(foreign);
    expect(isDatabaseFailure(runInNewContext(`new TypeError('x is not a function')`))).toBe(false);
  });

  it('a refusal of every address (an AggregateError with a code and no message) is named by its code', () => {
    const refused = Object.assign(new AggregateError([], ''), { code: 'ECONNREFUSED' });
    const failure = unavailableOr(refused, 'k', 'acquire a lease on');
    expect(failure).toBeInstanceOf(LeaseUnavailableError);
    expect((failure as Error).message).toMatch(/\(ECONNREFUSED\)/);
  });

  it('unavailableOr turns a database failure into a LeaseUnavailableError naming the operation, else leaves it', () => {
    const failure = unavailableOr(new Error('Connection terminated'), 'k', 'acquire a lease on');
    expect(failure).toBeInstanceOf(LeaseUnavailableError);
    expect((failure as Error).message).toMatch(/^Could not acquire a lease on "k": the database is unreachable/);
    const bug = new RangeError('bug');
    expect(unavailableOr(bug, 'k', 'x')).toBe(bug);
  });
});
