/**
 * The one TCP proxy of the suites (priority waiting, the fault suite): on 127.0.0.1 between one process and
 * PostgreSQL, for network faults on one machine:
 * - `pass`: forward both ways;
 * - `delay`: forward each chunk after `delayMs` (order kept);
 * - `drop`: forward requests, discard replies (a reply lost on the way back); a connection that lost bytes has a
 *   broken protocol stream, so it is reset when the mode changes, as TCP would after retransmissions fail;
 * - `blackhole` (`freeze()`): forward nothing either way and close nothing (a silent partition: the process looks
 *   dead to the database, and to itself only slow; a session the server ends meanwhile is news that cannot get
 *   through either); what was held back is delivered, in order, when it heals (`thaw()`);
 * - `stallNewConnections()`: new connections get no server until `thaw()` (their startup is never answered), while
 *   established ones keep working;
 * - `slowNewConnections(ms)`: every new connection reaches the server only `ms` after it was opened (a slow link or a
 *   busy server's fork and authentication), while established ones keep working;
 * - `holdRepliesAfterReady()`: new connections complete their startup (the server's first ReadyForQuery gets
 *   through), then every later reply to them is held until `thaw()`: a session whose first statement never answers.
 * - `joinStartupOf(applicationName)`: new connections of that `application_name` get their startup's replies up to
 *   its ReadyForQuery; from it on, the server's bytes and its end are kept, and `deliverJoined()` writes them to the
 *   client as one chunk (so its driver reads them in one read), then ends it: the server ending a session in the same
 *   read as the connection's completion.
 * The failover suite's SwitchableProxy (re-pointing a connection at a promoted standby) stays its own: see its file.
 */
import { createServer, type Server, Socket } from 'node:net';

export type ProxyMode = 'pass' | 'delay' | 'drop' | 'blackhole';

interface Pair {
  client: Socket;
  server: Socket;
  broken: boolean;
  /** Replies to this connection are held from its first ReadyForQuery on (see `holdRepliesAfterReady`). */
  holdAfterReady?: { ready: boolean; pending: Buffer };
  /** Replies to this connection are kept from its first ReadyForQuery on, for one write (see `joinStartupOf`). */
  joined?: { ready: boolean; pending: Buffer; kept: Buffer; serverEnded: boolean };
}

export class TcpProxy {
  private mode: ProxyMode = 'pass';
  private delayMs = 0;
  private readonly pairs = new Set<Pair>();
  private readonly held: Array<() => void> = [];
  private stallingNew = false;
  private holdingAfterReady = false;
  private newConnectionDelayMs = 0;
  private joining?: string;
  private readonly stalled: Array<() => void> = [];
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
    // Half-open allowed: a client's FIN is news like any other, and crosses a partition no more than its bytes do.
    this.server = createServer({ allowHalfOpen: true }, (client) => this.accept(client));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
    const proxied = new URL(url);
    proxied.hostname = '127.0.0.1';
    proxied.port = String(this.port);
    return proxied.toString();
  }

  /** A proxy for the server of `url`, started: resolves with the proxy and the URL to connect to instead. */
  static async inFrontOf(url: string): Promise<{ proxy: TcpProxy; url: string }> {
    const proxy = TcpProxy.forUrl(url);
    return { proxy, url: await proxy.start(url) };
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

  /** A silent partition: see `blackhole` above. */
  freeze(): void {
    this.set('blackhole');
  }

  /** Heals a partition and lets stalled connections through. */
  thaw(): void {
    this.stallingNew = false;
    this.holdingAfterReady = false;
    for (const pair of this.pairs) pair.holdAfterReady = undefined;
    this.set('pass');
    for (const release of this.held.splice(0)) release();
    for (const connect of this.stalled.splice(0)) connect();
  }

  /** New connections stall (their startup never answered) until `thaw()`; established ones keep working. */
  stallNewConnections(): void {
    this.stallingNew = true;
  }

  /** Every new connection reaches the server only `ms` after it was opened (0: at once). */
  slowNewConnections(ms: number): void {
    this.newConnectionDelayMs = ms;
  }

  /** New connections answer their startup, then nothing more until `thaw()` (see the module note). */
  holdRepliesAfterReady(): void {
    this.holdingAfterReady = true;
  }

  /** New connections of `applicationName` keep their replies from ReadyForQuery on (see the module note). */
  joinStartupOf(applicationName: string): void {
    this.joining = applicationName;
  }

  /** Connections whose ReadyForQuery is kept, and whether the server has ended each since. */
  get joinedStartups(): Array<{ serverEnded: boolean }> {
    return [...this.pairs].flatMap((pair) => (pair.joined?.ready ? [{ serverEnded: pair.joined.serverEnded }] : []));
  }

  /** Writes each joined connection's kept bytes as one chunk, then ends it if its server did; stops joining. */
  deliverJoined(): void {
    this.joining = undefined;
    for (const pair of this.pairs) {
      const joined = pair.joined;
      if (!joined?.ready) continue;
      pair.joined = undefined;
      pair.client.write(joined.kept);
      if (joined.serverEnded) pair.client.end(() => this.close(pair));
    }
  }

  get connections(): number {
    return this.pairs.size;
  }

  /** New connections held by `stallNewConnections()`, not yet let through. */
  get stalledConnections(): number {
    return this.stalled.length;
  }

  /** The server is gone: see `down` above. */
  async down(): Promise<void> {
    await this.stop();
    this.server = undefined;
  }

  /** The server is back on the same port (after `down()`). */
  async up(): Promise<void> {
    this.server = createServer({ allowHalfOpen: true }, (client) => this.accept(client));
    await new Promise<void>((resolve) => this.server!.listen(this.port, '127.0.0.1', resolve));
  }

  async stop(): Promise<void> {
    this.thaw();
    for (const pair of this.pairs) this.close(pair);
    await new Promise<void>((resolve) => (this.server?.listening ? this.server.close(() => resolve()) : resolve()));
  }

  private accept(client: Socket): void {
    const server = new Socket();
    const pair: Pair = { client, server, broken: false };
    if (this.holdingAfterReady) pair.holdAfterReady = { ready: false, pending: Buffer.alloc(0) };
    this.pairs.add(pair);
    let startup = true;
    client.on('data', (chunk) => {
      const first = startup;
      startup = false;
      if (first && this.joining !== undefined && applicationNameOf(chunk) === this.joining) {
        pair.joined = { ready: false, pending: Buffer.alloc(0), kept: Buffer.alloc(0), serverEnded: false };
      }
      this.forward(pair, server, chunk, false);
    });
    server.on('data', (chunk) => this.forward(pair, client, chunk, true));
    // The client's end of a session crosses a partition no more than its bytes do: a socket ended or destroyed in a
    // blackhole gets no answer (no FIN, no RST back) until the partition heals.
    const clientGone = () => (this.mode === 'blackhole' ? this.held.push(() => this.close(pair)) : this.close(pair));
    client.on('error', clientGone);
    client.on('end', clientGone);
    client.on('close', clientGone);
    // The server's end of a session crosses a partition no more than its bytes do.
    const serverGone = () => {
      if (pair.joined?.ready) pair.joined.serverEnded = true;
      else if (this.mode === 'blackhole') this.held.push(() => this.close(pair));
      else this.close(pair);
    };
    server.on('error', serverGone);
    server.on('close', serverGone);
    const connect = () => {
      client.resume();
      server.connect(this.targetPort, this.targetHost);
    };
    // A stalled connection's startup packet stays unread in the client socket until it connects.
    if (this.stallingNew) {
      client.pause();
      this.stalled.push(connect);
    } else if (this.newConnectionDelayMs > 0) {
      client.pause();
      setTimeout(() => client.readyState !== 'closed' && connect(), this.newConnectionDelayMs);
    } else connect();
  }

  private forward(pair: Pair, to: Socket, chunk: Buffer, reply: boolean): void {
    if (reply && pair.joined) {
      chunk = this.keepFromReady(pair.joined, chunk);
      if (chunk.length === 0) return;
    }
    if (reply && pair.holdAfterReady) {
      chunk = this.untilReady(pair.holdAfterReady, to, chunk);
      if (chunk.length === 0) return;
    }
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

  /**
   * Of a reply chunk to a `holdAfterReady` connection: forwards (returns) what comes up to and including the first
   * ReadyForQuery ('Z'), and holds the rest, for `thaw()` to deliver in order. Server messages are framed as a type
   * byte and a 4-byte length that counts itself.
   */
  private untilReady(state: { ready: boolean; pending: Buffer }, to: Socket, chunk: Buffer): Buffer {
    if (state.ready) {
      this.held.push(() => to.writable && to.write(chunk));
      return Buffer.alloc(0);
    }
    const data = Buffer.concat([state.pending, chunk]);
    let offset = 0;
    while (offset + 5 <= data.length) {
      const type = String.fromCharCode(data[offset]);
      const length = data.readUInt32BE(offset + 1);
      if (offset + 1 + length > data.length) break;
      offset += 1 + length;
      if (type === 'Z') {
        state.ready = true;
        const rest = data.subarray(offset);
        if (rest.length > 0) this.held.push(() => to.writable && to.write(rest));
        return data.subarray(0, offset);
      }
    }
    // Forward whole messages as they come (authentication takes round trips); keep a partial one for the next chunk.
    state.pending = data.subarray(offset);
    return data.subarray(0, offset);
  }

  /** Of a reply chunk to a joined connection: forwards (returns) what comes before its first ReadyForQuery. */
  private keepFromReady(state: NonNullable<Pair['joined']>, chunk: Buffer): Buffer {
    if (state.ready) {
      state.kept = Buffer.concat([state.kept, chunk]);
      return Buffer.alloc(0);
    }
    const data = Buffer.concat([state.pending, chunk]);
    let offset = 0;
    while (offset + 5 <= data.length) {
      const length = data.readUInt32BE(offset + 1);
      if (offset + 1 + length > data.length) break;
      if (String.fromCharCode(data[offset]) === 'Z') {
        state.ready = true;
        state.kept = data.subarray(offset);
        return data.subarray(0, offset);
      }
      offset += 1 + length;
    }
    state.pending = data.subarray(offset);
    return data.subarray(0, offset);
  }

  private close(pair: Pair): void {
    if (!this.pairs.delete(pair)) return;
    pair.client.destroy();
    pair.server.destroy();
  }
}

/** The `application_name` of a client's startup message (its first chunk), if it is one and names one. */
function applicationNameOf(chunk: Buffer): string | undefined {
  // Length, protocol 3.0, then name/value C strings up to an empty name.
  if (chunk.length < 8 || chunk.readUInt32BE(4) !== 196_608) return undefined;
  const fields = chunk.subarray(8, chunk.readUInt32BE(0)).toString('utf8').split('\0');
  const at = fields.indexOf('application_name');
  return at >= 0 && at % 2 === 0 ? fields[at + 1] : undefined;
}
