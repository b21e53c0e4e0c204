import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { chownSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '@app/pg-harness';
import pg from 'pg';

/** A real PgBouncer in front of the test server. */
export interface PgBouncer {
  /** `url` with host and port replaced by the bouncer's (any database name is routed to the same server). */
  via(url: string): string;
  /** The bouncer's own log, for failure messages. */
  log(): string;
  stop(): Promise<void>;
}

export interface PgBouncerOptions {
  poolMode?: 'transaction' | 'session';
  /** Server connections per (database, user): small, so that clients share them. */
  poolSize?: number;
  /** More `[pgbouncer]` settings, e.g. `server_login_retry` for a server that goes away and comes back. */
  settings?: Record<string, string | number>;
}

/** Debian installs it in /usr/sbin, which a non-root PATH may lack. */
const PGBOUNCER = existsSync('/usr/sbin/pgbouncer') ? '/usr/sbin/pgbouncer' : 'pgbouncer';

/**
 * Starts Debian's `pgbouncer` (1.18 in Debian 12) on a free loopback port with a generated ini and userlist in a
 * temporary directory. PgBouncer refuses to run as root, so as root it runs as the `postgres` user.
 */
export async function startPgBouncer(serverUrl: string, options: PgBouncerOptions = {}): Promise<PgBouncer> {
  const check = spawnSync(PGBOUNCER, ['--version'], { encoding: 'utf8' });
  if (check.status !== 0) {
    throw new Error('pgbouncer is not installed: `apt-get install pgbouncer` (Debian; .ci/run installs it)');
  }
  const server = new URL(serverUrl);
  const user = decodeURIComponent(server.username);
  const password = decodeURIComponent(server.password);
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'nest-pg-lease-pgbouncer-'));
  const ini = join(dir, 'pgbouncer.ini');
  const logFile = join(dir, 'pgbouncer.log');
  writeFileSync(join(dir, 'userlist.txt'), `"${user}" "${password.replace(/"/g, '""')}"\n`, { mode: 0o600 });
  writeFileSync(
    ini,
    [
      '[databases]',
      `* = host=${server.hostname} port=${server.port || 5432}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = scram-sha-256',
      `auth_file = ${join(dir, 'userlist.txt')}`,
      `pool_mode = ${options.poolMode ?? 'transaction'}`,
      `default_pool_size = ${options.poolSize ?? 4}`,
      'max_client_conn = 500',
      `logfile = ${logFile}`,
      `pidfile = ${join(dir, 'pgbouncer.pid')}`,
      'log_connections = 0',
      'log_disconnections = 0',
      ...Object.entries(options.settings ?? {}).map(([name, value]) => `${name} = ${value}`),
      '',
    ].join('\n'),
  );
  const root = process.getuid?.() === 0;
  const ids = root ? postgresIds() : undefined;
  if (ids) {
    for (const file of [dir, ini, join(dir, 'userlist.txt')]) chownSync(file, ids.uid, ids.gid);
  }
  const child: ChildProcess = spawn(PGBOUNCER, [ini], { stdio: ['ignore', 'pipe', 'pipe'], ...(ids ?? {}) });
  let output = '';
  child.stdout?.on('data', (chunk) => (output += chunk));
  child.stderr?.on('data', (chunk) => (output += chunk));
  const exited = once(child, 'exit');
  const log = () => {
    let file = '';
    try {
      file = readFileSync(logFile, 'utf8');
    } catch {
      // not written yet
    }
    return `${output}${file}`;
  };
  const via = (url: string) => {
    const target = new URL(url);
    target.hostname = '127.0.0.1';
    target.port = String(port);
    return target.toString();
  };
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGINT');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  // Ready when a client gets through to the server.
  const until = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) {
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`pgbouncer exited (${child.exitCode}):\n${log()}`);
    }
    const client = new pg.Client({ connectionString: via(serverUrl), connectionTimeoutMillis: 2_000 });
    client.on('error', () => undefined);
    const ready = await client.connect().then(
      () => client.query('SELECT 1').then(() => true),
      () => false,
    );
    await client.end().catch(() => undefined);
    if (ready) break;
    if (Date.now() > until) {
      await stop();
      throw new Error(`pgbouncer did not accept connections within 20 s:\n${log()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return { via, log, stop };
}

function postgresIds(): { uid: number; gid: number } {
  const id = (flag: string) => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim());
  const uid = id('-u');
  const gid = id('-g');
  if (!Number.isInteger(uid) || uid === 0) {
    throw new Error(
      'PgBouncer refuses to run as root and there is no `postgres` user to run it as (install pgbouncer)',
    );
  }
  return { uid, gid };
}
