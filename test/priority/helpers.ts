/**
 * Helpers of the priority-waiting specs: "processes" (a LeaseService on a DataSource of its own, named so the
 * database can tell its connections apart) and views of the waiter table. The TCP proxy that freezes a process's
 * traffic (a crash, as far as PostgreSQL can tell) is test/support/tcp-proxy.ts.
 */
import { randomBytes } from 'node:crypto';
import type { LeaseModuleOptions } from 'nest-pg-lease';
import type pg from 'pg';
import { LeaseWaitTimeoutError } from 'nest-pg-lease';
import { eventually, openLeaseService, type OpenedService, type TestDatabase } from '../support/db.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { mergeLeaseOptions, useParkWindow } from '../../libs/lease/src/internal.js';

export interface Proc extends OpenedService {
  readonly name: string;
  /** Owner column of its rows, and application_name of its pooled connections. */
  readonly owner: string;
}

/**
 * A LeaseService on a DataSource of its own (`openLeaseService`). `poolSize` sizes both the DataSource's pool and the
 * library's statement pool: `poolSize: 1` makes the statement pool's one backend show, in pg_stat_activity, the last
 * statement of the wait loop (see `untilAsleep`); heartbeats and LISTEN use connections of their own.
 */
export async function startProc(
  url: string,
  name: string,
  options: LeaseModuleOptions = {},
  poolSize = 4,
): Promise<Proc> {
  const owner = `${name}-${randomBytes(3).toString('hex')}`;
  const opened = await openLeaseService(url, mergeLeaseOptions({ owner, connections: { poolSize } }, options), {
    applicationName: owner,
    poolSize,
  });
  return { name, owner, ...opened };
}

/**
 * The `proc` of a priority spec: `startProc` on the file's database (or on `url`, e.g. through a TcpProxy), every
 * process started closed together after the tests, before `useTestDatabase` drops the database. `ignoreCloseErrors`
 * for files whose processes may be cut off from the server by then.
 */
export function procsOf(
  db: TestDatabase,
  { ignoreCloseErrors = false }: { ignoreCloseErrors?: boolean } = {},
): (name: string, options?: LeaseModuleOptions, poolSize?: number, url?: string) => Promise<Proc> {
  const procs: Proc[] = [];
  db.beforeDrop(() =>
    Promise.all(procs.map((p) => (ignoreCloseErrors ? p.close().catch(() => undefined) : p.close()))),
  );
  return async (name, options = {}, poolSize, url = db.url) => {
    const started = await startProc(url, name, options, poolSize);
    procs.push(started);
    return started;
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

/**
 * Resolves with the waiter row of `owner` once it is visible. With the waiting `call`, a call that settled instead
 * (an error on a loaded machine, say) fails at once with what it settled with, rather than after the timeout.
 */
export async function untilQueued(
  admin: pg.Client,
  key: string,
  owner: string,
  call?: { settled: () => boolean; error?: unknown },
): Promise<WaiterRow> {
  const rows = await eventually(
    () => rowsOf(admin, key, owner),
    (found) => {
      if (found.length === 1) return true;
      if (call?.settled())
        throw new Error(`${owner}'s wait for ${key} settled before its row was seen`, {
          cause: call.error,
        });
      return false;
    },
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
 * Resolves once the waiting call of `proc` (statement pool of one connection, only one call waiting) has made its first
 * attempt as a queued waiter and gone to sleep: its row exists and its statement backend is idle after an acquire
 * statement that started after the row was queued (a wait runs, on that one backend: an attempt that queues it when
 * refused, or an attempt then an enqueue; then its first attempt as a waiter).
 */
export async function untilAsleep(admin: pg.Client, key: string, proc: Proc): Promise<void> {
  await untilQueued(admin, key, proc.owner);
  await eventually(
    async () =>
      (
        await admin.query<{ state: string; query: string; after: boolean }>(
          `SELECT a.state, a.query, a.query_start > w.queued_at AS after
           FROM pg_stat_activity a JOIN job_lease_waiter w ON a.application_name = w.owner || ':statements'
             AND w.target_id = $2
           WHERE a.application_name = $1 || ':statements'`,
          [proc.owner, key],
        )
      ).rows,
    (backends) =>
      backends.length === 1 &&
      backends[0].state === 'idle' &&
      backends[0].after &&
      backends[0].query.trimStart().startsWith('WITH held AS'),
    `${proc.owner} asleep in line for ${key}`,
  );
}

/**
 * Test instrumentation in the database: every INSERT into the waiter table by a row of `owner`'s prefix sleeps
 * `seconds` in the server (a statement stalled inside PostgreSQL). Returns the function that removes it.
 */
export async function slowEnqueues(
  admin: pg.Client,
  ownerPrefix: string,
  seconds: number,
): Promise<() => Promise<void>> {
  const name = `slow_enqueue_${ownerPrefix.replace(/\W/g, '_')}`;
  await admin.query(`
    CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN IF NEW.owner LIKE '${ownerPrefix}-%' THEN PERFORM pg_sleep(${seconds}); END IF; RETURN NEW; END $$;
    CREATE TRIGGER ${name} BEFORE INSERT ON job_lease_waiter FOR EACH ROW EXECUTE FUNCTION ${name}();`);
  return async () => void (await admin.query(`DROP TRIGGER ${name} ON job_lease_waiter; DROP FUNCTION ${name}()`));
}

/**
 * How many backends of `owner`'s statements (the library's statement pool, `<owner>:statements`, or the DataSource's
 * own, `<owner>`) sleep in `pg_sleep` now: a stalled statement in flight.
 */
export async function sleepingIn(admin: pg.Client, owner: string): Promise<number> {
  const { rowCount } = await admin.query(
    `SELECT 1 FROM pg_stat_activity WHERE application_name IN ($1, $1 || ':statements') AND wait_event = 'PgSleep'`,
    [owner],
  );
  return rowCount ?? 0;
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
 * Crashes a waiting "process" for real (the model tests): its proxy freezes (nothing of it reaches the database any
 * more), its sessions end, and its waiter row of `key` is aged so it is dead at once (its owner's next heartbeat would
 * undo an aging by SQL alone, but none gets through).
 */
export async function crashWaiter(admin: pg.Client, key: string, proc: Proc, proxy: { freeze(): void }): Promise<void> {
  proxy.freeze();
  const sessions = `application_name = $1 OR application_name LIKE $1 || ':%'`;
  // Until none is left: a connection still authenticating (its replies held by the frozen proxy) shows its name only
  // once it is in, and would outlive a single round of kills (its client's end is held by the proxy too).
  await eventually(
    async () =>
      (await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE ${sessions}`, [proc.owner]))
        .rowCount,
    (n) => n === 0,
    `${proc.name} cut off`,
  );
  await admin.query(
    `UPDATE job_lease_waiter SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE target_id = $1 AND owner = $2`,
    [key, proc.owner],
  );
}

/** Ends every participant of a model run: thaws its proxy, closes its service, stops the proxy. */
export async function closeParticipants(
  participants: Iterable<{ proc: Proc; proxy?: { thaw(): void; stop(): Promise<void> } }>,
): Promise<void> {
  await Promise.all(
    [...participants].map(async ({ proc, proxy }) => {
      proxy?.thaw();
      await proc.close();
      await proxy?.stop();
    }),
  );
}

/** The timings of the model tests' processes: slow enough that a loaded machine never loses a lease by accident. */
export const MODEL_OPTIONS = {
  timing: { heartbeatIntervalMs: 500, leaseTimeoutMs: 10_000, waiterTimeoutMs: 3_000, waitPollIntervalMs: 1_000 },
};

/**
 * A participant of a model run: a "process" (`startProc`), behind a proxy of its own when it may crash. The models
 * order the line by when each call asks; a process that asks again within the park window of its own release is
 * queued by that release instead (the parked place, docs/group-commit.md, pinned by parked-place.e2e-spec.ts), so
 * their participants park nothing (`modelParticipant`).
 */
export async function startParticipant(
  db: TestDatabase,
  name: string,
  proxied: boolean,
): Promise<{ proc: Proc; proxy?: TcpProxy }> {
  const proxy = proxied ? TcpProxy.forUrl(db.url) : undefined;
  const url = proxy ? await proxy.start(db.url) : db.url;
  const proc = await startProc(url, name, mergeLeaseOptions(MODEL_OPTIONS, { tables: { createSchema: false } }), 2);
  return { proc: modelParticipant(proc), proxy };
}

/** `opened` with a park window of 0: no release of it queues it again (see `startParticipant`). */
export function modelParticipant<T extends OpenedService>(opened: T): T {
  useParkWindow(opened.service, 0);
  return opened;
}

/** A wait that had to time out did: `LeaseWaitTimeoutError`, and its waiter row gone before the rejection. */
export async function expectTimedOut(call: Promise<unknown>, admin: pg.Client, key: string, owner: string) {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(LeaseWaitTimeoutError);
  expect(await rowsOf(admin, key, owner)).toEqual([]);
}
