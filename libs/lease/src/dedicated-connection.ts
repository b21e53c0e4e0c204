import pg from 'pg';
import type { Queryable, SessionSource } from './lease-store.js';

/**
 * One connection of its own, outside the application's pool, for one kind of heartbeat: renewals must not queue
 * behind the application's queries when its pool is exhausted (that would lose leases of healthy holders), nor behind
 * each other (lease renewals and waiter renewals have a connection each). Any error drops the connection — after a
 * timeout its state is unknown, and the server rolls back whatever transaction it had open — and the next call opens
 * a fresh one.
 */
export class DedicatedConnection implements Queryable, SessionSource {
  private client?: Promise<pg.Client>;
  private closed = false;

  /**
   * @param config how to connect (read at each connect)
   * @param connectTimeoutMs bound of each connect
   * @param boundedMs when given, each connection is set up so that every statement on it ends within this many ms on
   *   the server (statement_timeout, lock_timeout, idle_in_transaction_session_timeout) and runs in READ COMMITTED,
   *   whatever the server's defaults: a single statement then needs no transaction around it (see
   *   `SessionSource.boundedMs`). Only on a session of its own: never through a transaction pooler.
   */
  constructor(
    private readonly config: () => pg.ClientConfig,
    private readonly connectTimeoutMs: number,
    readonly boundedMs?: number,
  ) {}

  query<R extends pg.QueryResultRow = any>(
    config: pg.QueryConfig & { query_timeout?: number },
  ): Promise<pg.QueryResult<R>> {
    return this.withSession((session) => session.query<R>(config));
  }

  /**
   * Runs `work` on this connection. If it fails, the connection is dropped: a sequence of statements (a transaction)
   * never continues on a fresh connection, and an abandoned one is rolled back by the server.
   */
  async withSession<T>(work: (session: Queryable) => Promise<T>): Promise<T> {
    if (this.closed) throw new Error('connection closed');
    const pending = (this.client ??= this.open());
    let client: pg.Client;
    try {
      client = await pending;
    } catch (error) {
      if (this.client === pending) this.client = undefined;
      throw error;
    }
    try {
      return await work(client);
    } catch (error) {
      // A server error (say, a cancelled statement) leaves the connection usable, but a timeout or a network error
      // does not; telling them apart is not worth a stuck heartbeat.
      this.drop(pending, client);
      throw error;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    const pending = this.client;
    this.client = undefined;
    const client = await pending?.catch(() => undefined);
    await client?.end().catch(() => undefined);
  }

  private open(): Promise<pg.Client> {
    const client = new pg.Client({ ...this.config(), connectionTimeoutMillis: this.connectTimeoutMs });
    const pending = client.connect().then(async () => {
      if (this.boundedMs !== undefined) await client.query(sessionBounds(this.boundedMs));
      return client;
    });
    // An idle connection's error must never crash the process: forget the connection, reconnect on the next call.
    client.on('error', () => this.drop(pending, client));
    return pending;
  }

  private drop(pending: Promise<pg.Client>, client: pg.Client): void {
    if (this.client === pending) this.client = undefined;
    client.end().catch(() => undefined);
  }
}

/**
 * The session settings of a bounded connection (one round trip, at connect). `ms` comes from validated options.
 * Custom plans always: a renewal's arrays hold thousands of leases, and a generic plan (PostgreSQL's choice after five
 * runs of a prepared statement, or the server's `plan_cache_mode = force_generic_plan`) estimates them at ten rows and
 * joins them in nested loops — at 5,000 leases a renewal then outlived its one-second bound on every tick.
 */
function sessionBounds(ms: number): pg.QueryConfig & { query_timeout: number } {
  const bound = Math.max(1, Math.floor(ms));
  return {
    text: `SET statement_timeout = ${bound}; SET lock_timeout = ${bound};
      SET idle_in_transaction_session_timeout = ${bound}; SET default_transaction_isolation = 'read committed';
      SET plan_cache_mode = force_custom_plan`,
    query_timeout: bound,
  };
}
