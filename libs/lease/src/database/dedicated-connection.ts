import pg from 'pg';
import { type Queryable, type SessionSource, sessionSetup } from './sessions.js';
import { closeClient, connectClient, SocketRegistry } from './sockets.js';

/**
 * One connection of its own, outside the application's pool, for one kind of heartbeat: renewals must not queue
 * behind other statements when a pool is exhausted (that would lose leases of healthy holders), nor behind each other
 * (lease renewals and waiter renewals have a connection each). Any error drops the connection — after a timeout its
 * state is unknown, and the server rolls back whatever transaction it had open — and the next call opens a fresh one.
 * A connection that fails at any step (connecting, its set-up) is closed, and closing never waits for a network that
 * does not answer: its socket is destroyed after `closeMs`.
 */
export class DedicatedConnection implements Queryable, SessionSource {
  private client?: Promise<pg.Client>;
  /** The client being opened, so close() can end it at once instead of waiting for a stalled network. */
  private opening?: pg.Client;
  private readonly sockets = new SocketRegistry();
  private closed = false;

  /**
   * @param config how to connect (read at each connect)
   * @param connectTimeoutMs bound of each connect and of its set-up
   * @param boundedMs when given, each connection is set up so that every statement on it ends within this many ms on
   *   the server (statement_timeout, lock_timeout, idle_in_transaction_session_timeout) and runs in READ COMMITTED,
   *   durable, planned for its parameters, whatever the server's defaults: a single statement then needs no
   *   transaction around it (see `SessionSource.boundedMs`). Only on a session of its own: never through a
   *   transaction pooler.
   * @param closeMs how long closing one connection may take before its socket is destroyed
   */
  constructor(
    private readonly config: () => pg.ClientConfig,
    private readonly connectTimeoutMs: number,
    readonly boundedMs?: number,
    private readonly closeMs = 1_000,
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

  /** Bounded whatever the network does (see the class note). */
  async close(): Promise<void> {
    this.closed = true;
    const pending = this.client;
    this.client = undefined;
    // A connection still opening is ended at once: its connect (or set-up) then fails, and open() closes it.
    if (this.opening) void closeClient(this.opening, 0);
    const client = await pending?.catch(() => undefined);
    if (client) await closeClient(client, this.closeMs);
    this.sockets.destroyAll();
  }

  private open(): Promise<pg.Client> {
    const client = new pg.Client({
      ...this.sockets.track(this.config()),
      connectionTimeoutMillis: this.connectTimeoutMs,
      keepAlive: true,
    });
    this.opening = client;
    const pending = (async () => {
      try {
        await connectClient(client);
        if (this.boundedMs !== undefined) {
          const setUp = { text: sessionSetup({ boundMs: this.boundedMs, customPlans: true }) };
          await (client as Queryable).query({ ...setUp, query_timeout: this.connectTimeoutMs });
        }
        if (this.closed) throw new Error('connection closed');
        return client;
      } catch (error) {
        // Connected or not, the client is ended (a session set-up that timed out would otherwise stay open).
        void closeClient(client, this.closeMs);
        throw error;
      } finally {
        if (this.opening === client) this.opening = undefined;
      }
    })();
    // An idle connection's error must never crash the process: forget the connection, reconnect on the next call.
    client.on('error', () => this.drop(pending, client));
    return pending;
  }

  private drop(pending: Promise<pg.Client>, client: pg.Client): void {
    if (this.client === pending) this.client = undefined;
    void closeClient(client, this.closeMs);
  }
}
