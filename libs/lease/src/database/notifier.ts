import type { Logger } from '@nestjs/common';
import pg from 'pg';
import { errorText } from '../errors/lease.messages.js';
import { quoteIdentifier } from '../schema/lease-schema.js';
import { parseHeadPayload } from './head-payload.js';
import { connectClient } from './sockets.js';
import { settleBy } from '../util/settle-by.js';

/**
 * One LISTEN connection per process. Head-only handoff: releases, dequeues and dead-waiter removals name the next
 * waiter (`<waiter id> <key>` on the head channel), so only that waiter attempts — or, for a grant a release handed
 * it, `<waiter id>/<fencing token> <key>`, which it then only confirms; a target key alone (on the key channel, sent
 * by older versions) wakes every waiter of the key. After a (re)connect every waiter is woken, since notifications
 * sent meanwhile are lost.
 */
export class Notifier {
  private client?: pg.Client;
  /** The client being connected, so close() can end it at once instead of waiting for a stalled network. */
  private opening?: pg.Client;
  private connecting?: Promise<void>;
  private retryTimer?: NodeJS.Timeout;
  private backoffMs = 100;
  private closed = false;

  constructor(
    private readonly connectionOptions: () => pg.ClientConfig,
    private readonly channel: string,
    private readonly onWake: (targetKey: string) => void,
    private readonly onReconnect: () => void,
    private readonly logger: Logger,
    /** Bounds the connection and the LISTEN statement: a stalled network must not keep a start pending. */
    private readonly timeoutMs: number,
    /** The head channel and what to do with a waiter it names (see the class note). */
    private readonly head?: {
      channel: string;
      onHead: (waiterId: string, targetKey: string, grant?: bigint) => void;
    },
  ) {}

  /** Connects once; resolves when listening or when the attempt failed (a retry is then scheduled). */
  start(): Promise<void> {
    if (this.client || this.closed) return Promise.resolve();
    this.connecting ??= this.connect().finally(() => (this.connecting = undefined));
    return this.connecting;
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ ...this.connectionOptions(), connectionTimeoutMillis: this.timeoutMs });
    this.opening = client;
    client.on('notification', (message) => {
      if (!message.payload) return;
      if (message.channel === this.channel) this.onWake(message.payload);
      else if (message.channel === this.head?.channel) {
        const named = parseHeadPayload(message.payload);
        if (named) this.head.onHead(named.waiterId, named.targetKey, named.grant);
      }
    });
    client.on('error', (error) => this.lostConnection(client, error));
    client.on('end', () => this.lostConnection(client));
    try {
      await connectClient(client);
      const listen: pg.QueryConfig & { query_timeout: number } = {
        text: [this.channel, this.head?.channel]
          .flatMap((channel) => (channel ? [`LISTEN ${quoteIdentifier(channel)}`] : []))
          .join('; '),
        query_timeout: this.timeoutMs,
      };
      await client.query(listen);
      if (this.closed) {
        this.endQuietly(client);
        return;
      }
      this.client = client;
      this.backoffMs = 100;
      this.onReconnect();
    } catch (error) {
      client.removeAllListeners('end');
      this.endQuietly(client);
      if (!this.closed) {
        this.logger.warn(`LISTEN connection failed (${String(error)}); waiters poll until it is back`);
        this.scheduleRetry();
      }
    } finally {
      if (this.opening === client) this.opening = undefined;
    }
  }

  private lostConnection(client: pg.Client, error?: unknown): void {
    if (this.client !== client) return;
    this.client = undefined;
    client.removeAllListeners('end');
    this.endQuietly(client);
    if (this.closed) return;
    this.logger.warn(`LISTEN connection lost${error ? ` (${errorText(error)})` : ''}; reconnecting`);
    this.scheduleRetry();
  }

  private scheduleRetry(): void {
    if (this.closed || this.retryTimer) return;
    const delay = this.backoffMs;
    this.backoffMs = Math.min(this.backoffMs * 2, 5_000);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      // Connection errors are handled in connect(); this catches the rest (the DataSource is gone, say): a timer
      // must never end the process with an unhandled rejection. A later wait() tries again.
      this.start().catch((error: unknown) => {
        this.logger.warn(`LISTEN connection cannot be reopened (${String(error)}); waiters poll`);
      });
    }, delay);
    this.retryTimer.unref();
  }

  /** Bounded whatever the network does: a client's end() can wait for a socket event that never comes. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    // Ending a client that is still connecting destroys its socket: connect() then fails at once.
    if (this.opening) this.endQuietly(this.opening);
    const giveUp = () => new Error('LISTEN connection still opening');
    const until = performance.now() + this.timeoutMs;
    await settleBy(this.connecting ?? Promise.resolve(), until, undefined, giveUp).catch(() => undefined);
    const client = this.client;
    this.client = undefined;
    if (client) {
      client.removeAllListeners('end');
      await settleBy(client.end(), performance.now() + this.timeoutMs, undefined, giveUp).catch(() => undefined);
    }
  }

  /** Ends a client without waiting for it (errors ignored). */
  private endQuietly(client: pg.Client): void {
    client.end().catch(() => undefined);
  }
}
