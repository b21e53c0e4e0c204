/**
 * A TCP proxy on 127.0.0.1 whose target can be changed, for failover on one machine:
 * - in front of "the database": clients connect here; at the failover it is re-pointed from the old primary to the
 *   promoted standby (what a DNS name, a virtual IP or a managed endpoint does), and refuses connections in between;
 * - between standby and primary (the replication link): `blackhole()` silently stops forwarding (a partition: the
 *   primary goes on committing, the standby stops receiving WAL), `cut()` drops the link and what it held.
 */
import { createServer, type Server, Socket } from 'node:net';

interface Pair {
  client: Socket;
  server: Socket;
}

export class SwitchableProxy {
  private targetPort?: number;
  private holding = false;
  private readonly pairs = new Set<Pair>();
  private server?: Server;
  port = 0;
  /** Connections accepted (refused ones included), for the report. */
  accepted = 0;

  constructor(readonly name: string) {}

  async start(targetPort: number | undefined): Promise<number> {
    this.targetPort = targetPort;
    this.server = createServer((client) => this.accept(client));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
    return this.port;
  }

  /** New connections go to `targetPort`; `undefined` refuses them (closes them at once). Open ones are kept. */
  point(targetPort: number | undefined): void {
    this.targetPort = targetPort;
  }

  /**
   * Stops forwarding in both directions without closing anything: bytes are held back (never delivered, see `cut`),
   * so neither end notices for as long as its own timeouts allow (wal_sender_timeout, wal_receiver_timeout: 60 s).
   */
  blackhole(): void {
    this.holding = true;
  }

  /** Ends every open connection and discards what a blackhole held; forwarding resumes for new connections. */
  cut(): void {
    this.holding = false;
    for (const pair of [...this.pairs]) this.close(pair);
  }

  get connections(): number {
    return this.pairs.size;
  }

  async stop(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private accept(client: Socket): void {
    this.accepted++;
    client.on('error', () => undefined);
    if (this.targetPort === undefined) {
      client.destroy();
      return;
    }
    const server = new Socket();
    const pair: Pair = { client, server };
    this.pairs.add(pair);
    // While holding, bytes are dropped: the connection is cut before the partition heals, as at a crash.
    client.on('data', (chunk) => this.holding || server.write(chunk));
    server.on('data', (chunk) => this.holding || client.write(chunk));
    for (const socket of [client, server]) {
      socket.on('error', () => this.close(pair));
      socket.on('close', () => this.close(pair));
    }
    server.connect(this.targetPort, '127.0.0.1');
  }

  private close(pair: Pair): void {
    if (!this.pairs.delete(pair)) return;
    pair.client.destroy();
    pair.server.destroy();
  }
}
