/**
 * How every statement of the library reaches PostgreSQL: on a session (a pooled client or a dedicated connection),
 * bounded on the client and on the server, in READ COMMITTED, durable — whatever the server's or the role's defaults.
 *
 * - A session of the library's own (its statement pool, its heartbeat connections, outside a transaction pooler) is
 *   set up once when it opens (`sessionSetup`): `statement_timeout`, `lock_timeout` and
 *   `idle_in_transaction_session_timeout` bound every statement on it on the server, its default isolation is
 *   READ COMMITTED, and `synchronous_commit = off` (a role default some deployments choose) is raised to `on`. A
 *   single statement there needs no transaction around it: one round trip. Its plans read the lease tables by index
 *   (`enable_seqscan = off`): a prepared statement's generic plan, made while a table was nearly empty, would
 *   otherwise scan it whole on every run once it has grown.
 * - A session shared with others (a transaction pooler hands each transaction any server connection) keeps no
 *   session state: each statement is framed in a short transaction that sets the same bounds with `SET LOCAL`
 *   (`framing`), so nothing outlives it.
 *
 * Either way the client gives up a little after the server (`runStatement`), so a statement the client abandoned has
 * already been ended by the server, and committed nothing, unless it was committing at that very moment.
 */
import pg from 'pg';
import { isSerializationFailure } from '../errors/database-errors.js';
import { SERIALIZATION_ATTEMPTS } from '../options/limits.js';

/** The part of a `pg` pool (or client) the store needs. */
export interface Queryable {
  query<R extends pg.QueryResultRow = any>(
    config: pg.QueryConfig & { query_timeout?: number },
  ): Promise<pg.QueryResult<R>>;
}

/** A pool: queries, and a client of its own when the moment a statement is sent matters. */
export interface PoolLike extends Queryable {
  connect(): Promise<pg.PoolClient>;
}

/** Runs a sequence of statements on one session; if the work fails, the session is not reused. */
export interface SessionSource {
  withSession<T>(work: (session: Queryable) => Promise<T>): Promise<T>;
  /**
   * Set when every session of this source was set up by `sessionSetup` with this bound: statements of at most this
   * many ms need no framing. Unset: each statement is framed (`framing`).
   */
  readonly boundedMs?: number;
}

/** How a session (or a framed statement) is bounded. */
export interface SessionBounds {
  /** statement_timeout, lock_timeout and idle_in_transaction_session_timeout, in ms (an integer ≥ 1). */
  readonly boundMs: number;
  /**
   * Plan every statement for its parameters (`plan_cache_mode = force_custom_plan`): a renewal's arrays hold
   * thousands of leases, and a generic plan (PostgreSQL's choice after five runs of a prepared statement, or the
   * server's `plan_cache_mode = force_generic_plan`) estimates them at ten rows and joins them in nested loops — at
   * 5,000 leases a renewal then outlived its one-second bound on every tick.
   */
  readonly customPlans?: boolean;
}

/**
 * Sends one statement on `session`. On a `pg` client it goes as a `pg.Query` of our own, with its name, callback and
 * client-side timeout set on it: handed a plain config object, `pg` (≥ 8.21) first copies it, property descriptors and
 * all, and wraps its callback in a promise of its own — per statement, on the lone caller's path.
 */
function send<R extends pg.QueryResultRow>(
  session: Queryable,
  config: { name?: string; text: string; values?: unknown[]; query_timeout: number },
): Promise<pg.QueryResult<R>> {
  if (!(session instanceof pg.Client)) return session.query<R>(config);
  return new Promise((resolve, reject) => {
    const query = new pg.Query(config.text, config.values) as unknown as pg.Submittable & {
      name?: string;
      query_timeout?: number;
      callback?: (error: Error | undefined, result: pg.QueryResult<R>) => void;
    };
    query.name = config.name;
    query.query_timeout = config.query_timeout;
    query.callback = (error, result) => (error ? reject(error) : resolve(result));
    session.query(query);
  });
}

/** A role or server default of `synchronous_commit = off` is raised to `on` (see docs/configuration.md, "Server defaults"). */
const DURABLE = (local: boolean) =>
  `SELECT CASE WHEN current_setting('synchronous_commit') = 'off'
    THEN set_config('synchronous_commit', 'on', ${local}) END`;

function integerMs(ms: number): number {
  return Math.max(1, Math.floor(ms));
}

/** The set-up of a session of the library's own: one round trip when it opens. `boundMs` comes from validated options. */
export function sessionSetup(bounds: SessionBounds): string {
  const ms = integerMs(bounds.boundMs);
  return [
    `SET statement_timeout = ${ms}`,
    `SET lock_timeout = ${ms}`,
    `SET idle_in_transaction_session_timeout = ${ms}`,
    `SET default_transaction_isolation = 'read committed'`,
    // Every statement of the library finds its rows by key: a scan is never the plan to keep (see the module note).
    'SET enable_seqscan = off',
    ...(bounds.customPlans ? ['SET plan_cache_mode = force_custom_plan'] : []),
    DURABLE(false),
  ].join('; ');
}

/**
 * The opening of a framed statement on a shared session: a READ COMMITTED transaction whose bounds end with it. A
 * stalled client cannot keep its row locks for longer (idle_in_transaction_session_timeout), and a session dropped
 * before COMMIT is rolled back.
 */
export function framing(bounds: SessionBounds): string {
  const ms = integerMs(bounds.boundMs);
  return [
    'BEGIN ISOLATION LEVEL READ COMMITTED',
    `SET LOCAL statement_timeout = ${ms}`,
    `SET LOCAL lock_timeout = ${ms}`,
    `SET LOCAL idle_in_transaction_session_timeout = ${ms}`,
    ...(bounds.customPlans ? ['SET LOCAL plan_cache_mode = force_custom_plan'] : []),
    DURABLE(true),
  ].join('; ');
}

/** A statement (its text, parameters and, when prepared, name) and its bounds. */
export interface BoundedStatement extends Pick<pg.QueryConfig, 'name' | 'text' | 'values'> {
  /** The server ends the statement after this many ms (its session's bound when that is larger). */
  readonly boundMs: number;
  /** The client gives up this much later than the server: the server's answer (an error) has time to arrive. */
  readonly slackMs?: number;
  readonly customPlans?: boolean;
}

/**
 * Runs one statement on a session of `source`, bounded on the client and the server (see the module note).
 * A statement without `boundMs` gets `defaultBoundMs`. `sentAt`: the monotonic time it was sent — after waiting for a
 * session and after the framing, so a lease counts from when the database could have written it at the earliest.
 */
export function runStatement<R extends pg.QueryResultRow>(
  source: SessionSource,
  statement: Omit<BoundedStatement, 'boundMs'> & { boundMs?: number },
  defaultBoundMs?: number,
): Promise<{ rows: R[]; sentAt: number }> {
  const { slackMs = 0, customPlans } = statement;
  const boundMs = statement.boundMs ?? defaultBoundMs;
  if (boundMs === undefined) return Promise.reject(new TypeError('nest-pg-lease: a statement without a bound (a bug)'));
  // The statement as `pg` takes it, built once with a fixed shape (no copies of `statement`: on the lone caller's
  // path every object copy is client CPU paid per call).
  const config = {
    name: statement.name,
    text: statement.text,
    values: statement.values,
    query_timeout: 0,
  };
  return source.withSession(async (session) => {
    if (source.boundedMs !== undefined && boundMs <= source.boundedMs) {
      // One statement, sent now: its whole bound is its client timeout (no deadline to share, no closure per call).
      const sentAt = performance.now();
      config.query_timeout = Math.max(1, Math.ceil(boundMs + slackMs));
      const { rows } = await send<R>(session, config);
      return { rows, sentAt };
    }
    const deadline = performance.now() + boundMs + slackMs;
    const left = () => Math.max(1, Math.ceil(deadline - performance.now()));
    await session.query({ text: framing({ boundMs, customPlans }), query_timeout: left() });
    const sentAt = performance.now();
    config.query_timeout = left();
    const { rows } = await send<R>(session, config);
    await session.query({ text: 'COMMIT', query_timeout: left() });
    return { rows, sentAt };
  });
}

/**
 * Sessions from a pool: a client is checked out for the work and released as broken if the work fails. A checked-out
 * client has no error listener of the pool's: if the server ends the session right after our reply (both in one TCP
 * read), the error event would come before our release and crash the process — it is noted instead.
 */
export function poolSessions(pool: PoolLike, boundedMs?: number): SessionSource {
  return {
    boundedMs,
    async withSession(work) {
      const client = await pool.connect();
      let failed: Error | undefined;
      const onError = (error: Error) => (failed = error);
      client.on('error', onError);
      try {
        return await work(client);
      } catch (error) {
        failed ??= error as Error;
        throw error;
      } finally {
        client.off('error', onError);
        client.release(failed);
      }
    },
  };
}

/** `source` as a session source: a pool's sessions are its clients (see `poolSessions`). */
export function sessionsOf(source: SessionSource | PoolLike): SessionSource {
  return 'withSession' in source ? source : poolSessions(source, (source as { boundedMs?: number }).boundedMs);
}

/** Runs `statement` again (a few times, with a short jittered pause) when it fails with a serialization failure. */
export async function retryingSerializationFailures<T>(statement: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await statement();
    } catch (error) {
      if (attempt >= SERIALIZATION_ATTEMPTS || !isSerializationFailure(error)) throw error;
      if (attempt > 1) await new Promise((resolve) => setTimeout(resolve, Math.random() * 5 * attempt));
    }
  }
}
