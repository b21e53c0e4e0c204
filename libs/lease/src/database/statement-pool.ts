import pg from 'pg';
import { isUnsupportedSetting } from '../errors/database-errors.js';
import { type PoolLike, poolSessions, type Queryable, type SessionBounds, sessionSetup } from './sessions.js';
import { listenToNewClients, SocketRegistry } from './sockets.js';

/** How long the server may take to notice that the client of a statement went away (see `StatementPool`). */
const CLIENT_CHECK_MS = 1_000;

export interface StatementPoolOptions {
  /** Most connections at once. */
  readonly max: number;
  /** Bounds getting a connection: connecting, or waiting for a free one. */
  readonly connectTimeoutMs: number;
  /**
   * The session bounds of every connection (see `sessionSetup`); unset behind a transaction pooler, whose sessions
   * keep no state (each statement then frames its own).
   */
  readonly bounds?: SessionBounds;
}

/**
 * The library's own connections for its statements — acquisitions, releases, waiter changes, reads — outside the
 * application's pool, configured like it (`config`: the DataSource's connection settings): each connection is set up
 * once when it is first used, so every statement on it is bounded on the server (statement_timeout, lock_timeout) and
 * runs in READ COMMITTED with durable commits whatever the role's defaults; getting a connection is bounded
 * (`connectTimeoutMs`); on PostgreSQL ≥ 14 (where the platform allows) the server also checks every second that the
 * client of a running statement is still there (`client_connection_check_interval`), so a statement whose connection
 * the library destroyed (a timeout, `close()`) is ended, not committed later. `fenced()` stays on the application's
 * DataSource: the work writes through its EntityManager in the same transaction.
 */
export class StatementPool implements PoolLike {
  private pool?: pg.Pool;
  private readonly sockets = new SocketRegistry();
  private readonly setUp = new WeakSet<pg.PoolClient>();
  /** Whether `client_connection_check_interval` can be set (PostgreSQL ≥ 14 on a platform that supports it). */
  private clientCheck?: boolean;
  private closed = false;

  constructor(
    private readonly config: () => pg.ClientConfig,
    private readonly options: StatementPoolOptions,
  ) {}

  /** The session bound of every connection, when they have one (see `SessionSource.boundedMs`). */
  get boundedMs(): number | undefined {
    return this.options.bounds?.boundMs;
  }

  async connect(): Promise<pg.PoolClient> {
    if (this.closed) throw new Error('nest-pg-lease: the lease service is closed (its connections are gone)');
    const client = await this.pgPool().connect();
    const { bounds } = this.options;
    if (bounds && !this.setUp.has(client)) {
      try {
        await this.setUpSession(client, bounds);
        this.setUp.add(client);
      } catch (error) {
        client.release(error as Error);
        throw error;
      }
    }
    return client;
  }

  /** One statement on a checked-out client, released as broken if it fails (see `poolSessions`). */
  query<R extends pg.QueryResultRow = any>(
    config: pg.QueryConfig & { query_timeout?: number },
  ): Promise<pg.QueryResult<R>> {
    return poolSessions(this).withSession((client) => client.query<R>(config));
  }

  /** Closes every connection within `boundMs`: politely, else their sockets are destroyed. Never rejects. */
  async end(boundMs: number): Promise<void> {
    this.closed = true;
    const pool = this.pool;
    if (!pool) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      pool.end().catch(() => undefined),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, boundMs);
        timer.unref();
      }),
    ]);
    clearTimeout(timer);
    this.sockets.destroyAll();
  }

  private async setUpSession(client: pg.PoolClient, bounds: SessionBounds): Promise<void> {
    const timeout = this.options.connectTimeoutMs;
    if (this.clientCheck === undefined) {
      // PostgreSQL 13 does not know the setting, and a platform without POLLRDHUP refuses any value but 0.
      this.clientCheck = await (client as Queryable)
        .query({ text: `SET client_connection_check_interval = ${CLIENT_CHECK_MS}`, query_timeout: timeout })
        .then(
          () => true,
          (error: unknown) => {
            if (isUnsupportedSetting(error)) return false;
            throw error;
          },
        );
    }
    const check = this.clientCheck ? `; SET client_connection_check_interval = ${CLIENT_CHECK_MS}` : '';
    await (client as Queryable).query({ text: sessionSetup(bounds) + check, query_timeout: timeout });
  }

  private pgPool(): pg.Pool {
    if (!this.pool) {
      const pool = new pg.Pool({
        ...this.sockets.track(this.config()),
        max: this.options.max,
        connectionTimeoutMillis: this.options.connectTimeoutMs,
        keepAlive: true,
      });
      // A connection's error (the server ended the session, say) must never crash the process, idle or checked out
      // (then the statement in flight fails with it, and the client is released as broken): pg-pool removes the
      // client, and the next statement gets a fresh one.
      pool.on('error', () => undefined);
      listenToNewClients(pool);
      this.pool = pool;
    }
    return this.pool;
  }
}
