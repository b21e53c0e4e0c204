/** The sockets of the library's own connections, and closing a connection whatever the network does. */
import { Socket } from 'node:net';
import type pg from 'pg';

/**
 * The sockets of the library's own connections, so that a connection that does not answer can be destroyed: a
 * client's `end()` waits for the server's FIN, which a blackholed network never delivers. A `stream` of the
 * application's own configuration (a cloud connector, say) is kept and tracked the same way.
 */
export class SocketRegistry {
  private readonly sockets = new Set<Socket>();

  /** `config` with a stream factory that records each socket it makes. */
  track(config: pg.ClientConfig): pg.ClientConfig {
    const given = config.stream as unknown;
    // A stream object (not a factory) serves one connection only: leave such a configuration alone.
    if (given !== undefined && typeof given !== 'function') return config;
    const factory = given as ((connection: pg.ClientConfig) => Socket) | undefined;
    const stream = (connection: pg.ClientConfig): Socket => {
      const socket = factory ? factory(connection) : new Socket();
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
      return socket;
    };
    return { ...config, stream: stream as never };
  }

  /** Destroys every socket still open. */
  destroyAll(): void {
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
  }

  get size(): number {
    return this.sockets.size;
  }
}

/** The socket under a `pg` client (its connection's stream). */
function socketOf(client: pg.Client): { destroy(): void } | undefined {
  return (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream;
}

/**
 * Ends a client within `boundMs`: a polite `end()` (Terminate, then the server's FIN), else the socket is destroyed.
 * Never rejects.
 */
export async function closeClient(client: pg.Client, boundMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const ended = client.end().then(
    () => true,
    () => false,
  );
  const late = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), boundMs);
    timer.unref();
  });
  const polite = await Promise.race([ended, late]);
  clearTimeout(timer);
  if (!polite) socketOf(client)?.destroy();
}

/**
 * `client.connect()`, settled whatever happens to the client meanwhile: pg never settles a `connect()` whose client is
 * ended while it connects (its handler of the connection's end skips the callback once `end()` was called), so a
 * close() racing a connection being opened would wait for it forever. This also rejects when the client ends first.
 */
export function connectClient(client: pg.Client): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const ended = () => reject(new Error('Connection ended while connecting'));
    client.once('end', ended);
    client.connect().then(
      () => {
        client.off('end', ended);
        resolve();
      },
      (error: unknown) => {
        client.off('end', ended);
        reject(error);
      },
    );
  });
}

const listened = new WeakSet<pg.Pool>();

/**
 * Gives each new connection of `pool` an error listener that stays (once per pool, whoever's pool it is). pg-pool
 * gives a client none while it connects and takes its own away when it hands the client out; the caller (TypeORM's
 * query runner: one promise step later) adds its own after that. An error read in between — the server ending the
 * session in the same read as the connection's completion, as a failover does — would be emitted with nobody listening
 * and end the process. The listener does nothing: the client is not queryable afterwards, so its first statement
 * fails and it is released as broken; pg-pool's and TypeORM's own listeners still run when theirs are attached.
 */
export function listenToNewClients(pool: pg.Pool): void {
  if (listened.has(pool)) return;
  listened.add(pool);
  // pg-pool emits 'connect' before it removes its own listener and before the caller hears of the client.
  pool.on('connect', (client) => client.on('error', () => undefined));
}
