/**
 * Helpers of the priority-waiting specs: "processes" (a LeaseService on a DataSource of its own, named so the
 * database can tell its connections apart), views of the waiter table, and a TCP proxy that can freeze a process's
 * traffic (a crash, as far as PostgreSQL can tell).
 */
import { randomBytes } from 'node:crypto';
import { createServer, type Server, Socket } from 'node:net';
import { LeaseService, type LeaseModuleOptions } from 'nest-pg-lease';
import type pg from 'pg';
import { DataSource } from 'typeorm';
import { eventually, FAST } from '../support/db.js';

export interface Proc {
  readonly name: string;
  /** Owner column of its rows, and application_name of its pooled connections. */
  readonly owner: string;
  readonly service: LeaseService;
  readonly dataSource: DataSource;
  close(): Promise<void>;
}

/**
 * A LeaseService on a DataSource of its own. `poolSize: 1` makes the pool's one backend show, in pg_stat_activity,
 * the last statement of the wait loop (see `untilAsleep`); heartbeats and LISTEN use connections of their own.
 */
export async function startProc(
  url: string,
  name: string,
  options: LeaseModuleOptions = {},
  poolSize = 4,
): Promise<Proc> {
  const owner = `${name}-${randomBytes(3).toString('hex')}`;
  const dataSource = new DataSource({ type: 'postgres', url, applicationName: owner, extra: { max: poolSize } });
  await dataSource.initialize();
  const service = new LeaseService(dataSource, { createSchema: true, ...FAST, owner, ...options });
  await service.init();
  return {
    name,
    owner,
    service,
    dataSource,
    close: async () => {
      await service.close();
      if (dataSource.isInitialized) await dataSource.destroy();
    },
  };
}

export interface WaiterRow {
  owner: string;
  priority: number;
  seq: string;
  queued_at: Date;
  heartbeat_at: Date;
  live: boolean;
}

/** The waiter rows of a target in grant order (dead ones included, flagged). */
export async function waiterRows(admin: pg.Client, key: string): Promise<WaiterRow[]> {
  const { rows } = await admin.query<WaiterRow>(
    `SELECT owner, priority, seq::text AS seq, queued_at, heartbeat_at,
       heartbeat_at + timeout_ms * interval '1 millisecond' > clock_timestamp() AS live
     FROM job_lease_waiter WHERE target_id = $1 ORDER BY priority DESC, seq`,
    [key],
  );
  return rows;
}

export async function rowsOf(admin: pg.Client, key: string, owner: string): Promise<WaiterRow[]> {
  return (await waiterRows(admin, key)).filter((row) => row.owner === owner);
}

/** Resolves with the waiter row of `owner` once it is visible. */
export async function untilQueued(admin: pg.Client, key: string, owner: string): Promise<WaiterRow> {
  const rows = await eventually(
    () => rowsOf(admin, key, owner),
    (found) => found.length === 1,
    `${owner} queued for ${key}`,
  );
  return rows[0];
}

/** Owner of the lease of `key`, or null (none, or released). */
export async function holderOf(admin: pg.Client, key: string): Promise<string | null> {
  const { rows } = await admin.query<{ owner: string }>(
    'SELECT owner FROM job_lease WHERE target_id = $1 AND lease_token IS NOT NULL',
    [key],
  );
  return rows[0]?.owner ?? null;
}

/**
 * Resolves once the waiting call of `proc` (pool of one connection, only one call waiting) has made its first
 * attempt as a queued waiter and gone to sleep: its row exists and its pooled backend is idle after the acquire
 * statement (the statements of a wait run in the order attempt, enqueue, attempt on that one backend).
 */
export async function untilAsleep(admin: pg.Client, key: string, proc: Proc): Promise<void> {
  await untilQueued(admin, key, proc.owner);
  await eventually(
    async () =>
      (
        await admin.query<{ state: string; query: string }>(
          'SELECT state, query FROM pg_stat_activity WHERE application_name = $1',
          [proc.owner],
        )
      ).rows,
    (backends) =>
      backends.length === 1 && backends[0].state === 'idle' && backends[0].query.trimStart().startsWith('WITH held AS'),
    `${proc.owner} asleep in line for ${key}`,
  );
}

/** Tracks a promise's outcome without awaiting it. */
export function track<T>(promise: Promise<T>): {
  promise: Promise<T>;
  settled: () => boolean;
  value?: T;
  error?: unknown;
} {
  const state: { promise: Promise<T>; settled: () => boolean; value?: T; error?: unknown; done: boolean } = {
    promise,
    done: false,
    settled: () => state.done,
  };
  promise.then(
    (value) => Object.assign(state, { value, done: true }),
    (error: unknown) => Object.assign(state, { error, done: true }),
  );
  return state;
}

/**
 * A TCP proxy in front of PostgreSQL for one process. `freeze()` stops forwarding both ways and closes nothing:
 * the process looks dead to the database (no statement, no heartbeat arrives) and to itself it only looks slow.
 * `thaw()` delivers what was held back, in order.
 */
export class FreezingProxy {
  private server?: Server;
  private frozen = false;
  /** New connections are accepted but get no server until thawed (connection attempts stall); old ones flow. */
  private stallingNew = false;
  private readonly stalled: Array<() => void> = [];
  private readonly held: Array<() => void> = [];
  private readonly sockets = new Set<Socket>();

  constructor(private readonly target: URL) {}

  async start(): Promise<string> {
    this.server = createServer((client) => {
      const upstream = new Socket();
      for (const socket of [client, upstream]) {
        this.sockets.add(socket);
        socket.on('error', () => undefined);
        socket.on('close', () => this.sockets.delete(socket));
      }
      client.on('close', () => upstream.destroy());
      // A session the server ends while frozen is news that cannot get through either.
      upstream.on('close', () => (this.frozen ? this.held.push(() => client.destroy()) : client.destroy()));
      client.on('data', (chunk) => this.forward(upstream, chunk));
      upstream.on('data', (chunk) => this.forward(client, chunk));
      const connect = () => {
        client.resume();
        upstream.connect(Number(this.target.port || 5432), this.target.hostname);
      };
      // A stalled connection's startup packet stays unread in the client socket until it connects.
      if (this.stallingNew) {
        client.pause();
        this.stalled.push(connect);
      } else connect();
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    const proxied = new URL(this.target);
    proxied.hostname = '127.0.0.1';
    proxied.port = String((this.server.address() as { port: number }).port);
    return proxied.toString();
  }

  freeze(): void {
    this.frozen = true;
  }

  thaw(): void {
    this.frozen = false;
    this.stallingNew = false;
    for (const send of this.held.splice(0)) send();
    for (const connect of this.stalled.splice(0)) connect();
  }

  /** New connections stall (their startup never answered) until `thaw()`; established ones keep working. */
  stallNewConnections(): void {
    this.stallingNew = true;
  }

  async stop(): Promise<void> {
    this.thaw();
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private forward(to: Socket, chunk: Buffer): void {
    if (this.frozen) this.held.push(() => to.write(chunk));
    else to.write(chunk);
  }
}
