import pg from 'pg';
import type { Queryable } from './lease-store.js';

/**
 * One connection of its own, outside the application's pool, for the heartbeats: renewals must not queue behind the
 * application's queries when its pool is exhausted (that would lose leases of healthy holders). Any error drops the
 * connection — after a timeout its state is unknown — and the next call opens a fresh one.
 */
export class DedicatedConnection implements Queryable {
  private client?: Promise<pg.Client>;
  private closed = false;

  constructor(
    private readonly config: () => pg.ClientConfig,
    private readonly connectTimeoutMs: number,
  ) {}

  async query<R extends pg.QueryResultRow = any>(config: pg.QueryConfig & { query_timeout?: number }): Promise<pg.QueryResult<R>> {
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
      return await client.query<R>(config);
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
    const pending = client.connect().then(() => client);
    // An idle connection's error must never crash the process: forget the connection, reconnect on the next call.
    client.on('error', () => this.drop(pending, client));
    return pending;
  }

  private drop(pending: Promise<pg.Client>, client: pg.Client): void {
    if (this.client === pending) this.client = undefined;
    client.end().catch(() => undefined);
  }
}
