/**
 * A worker's `pg` clients, traced for the one crash the schedule has seen without explaining it: a client that gets
 * an `'error'` (a FATAL such as 57P01 on a server restart) while it has no `'error'` listener throws it, and the
 * process dies (seen twice, regression seed 2, a restarted worker; not reproduced on purpose). Imported first by the
 * workers: every client remembers where it was connected (the caller's synchronous stack: a pool's `connect()` and
 * who asked for it), and a client about to throw an unheard error writes that origin to stderr — the worker's log
 * in the run's artifacts — before it does. It changes nothing else: the error is still thrown.
 */
import pg from 'pg';

const origins = new WeakMap<object, string>();
/** Every client connected in this process (weakly), for the sampler below. */
const clients = new Set<WeakRef<object>>();
const reported = new WeakSet<object>();
const proto = pg.Client.prototype as unknown as {
  connect: (...args: unknown[]) => unknown;
  emit: (event: string | symbol, ...args: unknown[]) => boolean;
  listenerCount: (event: string) => number;
};

const connect = proto.connect;
proto.connect = function (this: object, ...args: unknown[]) {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 30;
  origins.set(this, new Error('this pg client was connected here').stack ?? '(no stack)');
  Error.stackTraceLimit = limit;
  clients.add(new WeakRef(this));
  return connect.apply(this, args);
};

const emit = proto.emit;
proto.emit = function (this: typeof proto, event: string | symbol, ...args: unknown[]) {
  if (event === 'error' && this.listenerCount('error') === 0) {
    const error = args[0] as { code?: string; message?: string } | undefined;
    process.stderr.write(
      `[pg-error-origins] an 'error' (${error?.code ?? '?'}: ${error?.message ?? '?'}) reached a pg client ` +
        `with no 'error' listener; ${origins.get(this) ?? 'its origin was not recorded'}\n`,
    );
  }
  return emit.call(this, event, ...args);
};

/**
 * The window itself, without waiting for an error to fall into it: every 5 ms, a connected client that is not ending
 * and has no `'error'` listener is reported once, with its origin. A window shorter than a turn of the event loop
 * cannot be seen here, and cannot crash either: an error reaches a client only from a socket's own turn.
 */
interface ClientState {
  _connected?: boolean;
  _ending?: boolean;
  _queryable?: boolean;
  listenerCount(event: string): number;
}
setInterval(() => {
  for (const ref of clients) {
    const client = ref.deref() as ClientState | undefined;
    if (!client) {
      clients.delete(ref);
      continue;
    }
    if (!client._connected || client._ending || !client._queryable || reported.has(client)) continue;
    if (client.listenerCount('error') > 0) continue;
    reported.add(client);
    process.stderr.write(
      `[pg-error-origins] a connected pg client has no 'error' listener (an error now would end the process); ` +
        `${origins.get(client) ?? 'its origin was not recorded'}\n`,
    );
  }
}, 5).unref();
