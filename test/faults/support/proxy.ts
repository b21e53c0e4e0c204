/**
 * A TCP proxy on 127.0.0.1 between one worker and PostgreSQL, for network faults on one machine:
 * - `pass`: forward both ways;
 * - `delay`: forward each chunk after `delayMs` (order kept);
 * - `drop`: forward requests, discard replies (a reply lost on the way back); a connection that lost bytes has a
 *   broken protocol stream, so it is reset when the mode changes, as TCP would after retransmissions fail;
 * - `blackhole`: forward nothing either way and close nothing (a silent partition); forwarding resumes when it heals.
 */
import { createServer, type Server, Socket } from 'node:net';

export type ProxyMode = 'pass' | 'delay' | 'drop' | 'blackhole';

interface Pair {
  client: Socket;
  server: Socket;
  broken: boolean;
}

export class TcpProxy {
  private mode: ProxyMode = 'pass';
  private delayMs = 0;
  private readonly pairs = new Set<Pair>();
  private readonly held: Array<() => void> = [];
  /** When the last delayed chunk to each socket goes out: later chunks never overtake it. */
  private readonly due = new WeakMap<Socket, number>();
  private server?: Server;
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  /** Starts listening; resolves with a URL like `url` but pointing at the proxy. */
  async start(url: string): Promise<string> {
    this.server = createServer((client) => this.accept(client));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
    const proxied = new URL(url);
    proxied.hostname = '127.0.0.1';
    proxied.port = String(this.port);
    return proxied.toString();
  }

  static forUrl(url: string): TcpProxy {
    const parsed = new URL(url);
    return new TcpProxy(parsed.hostname, Number(parsed.port || 5432));
  }

  set(mode: ProxyMode, delayMs = 0): void {
    const previous = this.mode;
    this.mode = mode;
    this.delayMs = delayMs;
    if (previous === 'drop' && mode !== 'drop') {
      for (const pair of this.pairs) if (pair.broken) this.close(pair);
    }
    if (previous === 'blackhole' && mode !== 'blackhole') {
      for (const release of this.held.splice(0)) release();
    }
  }

  get connections(): number {
    return this.pairs.size;
  }

  async stop(): Promise<void> {
    for (const pair of this.pairs) this.close(pair);
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private accept(client: Socket): void {
    const server = new Socket();
    const pair: Pair = { client, server, broken: false };
    this.pairs.add(pair);
    client.on('data', (chunk) => this.forward(pair, server, chunk, false));
    server.on('data', (chunk) => this.forward(pair, client, chunk, true));
    for (const socket of [client, server]) {
      socket.on('error', () => this.close(pair));
      socket.on('close', () => this.close(pair));
    }
    server.connect(this.targetPort, this.targetHost);
  }

  private forward(pair: Pair, to: Socket, chunk: Buffer, reply: boolean): void {
    switch (this.mode) {
      case 'pass':
      case 'delay': {
        const now = performance.now();
        const at = Math.max(now + (this.mode === 'delay' ? this.delayMs : 0), this.due.get(to) ?? 0);
        if (at <= now) to.write(chunk);
        else {
          this.due.set(to, at);
          setTimeout(() => to.writable && to.write(chunk), at - now);
        }
        return;
      }
      case 'drop':
        if (reply) pair.broken = true;
        else to.write(chunk);
        return;
      case 'blackhole':
        // Kept in order and delivered when the partition heals, as TCP would retransmit them.
        this.held.push(() => to.writable && to.write(chunk));
        return;
    }
  }

  private close(pair: Pair): void {
    if (!this.pairs.delete(pair)) return;
    pair.client.destroy();
    pair.server.destroy();
  }
}
