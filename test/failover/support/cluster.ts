/**
 * A real primary and a streaming standby on loopback, from the embedded PostgreSQL binaries (the same version as
 * every other suite; no pg_basebackup needed). The standby is made with the low-level backup API:
 * `pg_backup_start`, a copy of the running primary's data directory, `pg_backup_stop`'s backup label, then
 * `standby.signal` and `primary_conninfo`. A physical replication slot keeps the WAL the standby needs from the
 * start of the backup. The standby reaches the primary through a proxy (the replication link), so the suite can
 * partition them; clients reach "the database" through another proxy that the failover re-points.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  copyFileSync,
  createWriteStream,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  writeFileSync,
  type WriteStream,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { embeddedBinaries, type EmbeddedBinaries, freePort, initCluster, removeWhenGone } from '@app/pg-harness';
import pg from 'pg';
import { SwitchableProxy } from './proxy.js';

export const DATABASE = 'failover';
/** The standby's name on the primary (application_name), as `synchronous_standby_names` refers to it. */
const STANDBY_NAME = 'standby1';
const SLOT = 'standby1_slot';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** One postmaster on its own data directory and port. Its server log goes to `logFile`. */
export class PgNode {
  private process?: ChildProcess;
  private exited?: Promise<void>;

  constructor(
    readonly name: string,
    private readonly binaries: EmbeddedBinaries,
    readonly dataDir: string,
    readonly port: number,
    private readonly settings: Record<string, string | number>,
    private readonly log: WriteStream,
  ) {}

  get pid(): number | undefined {
    return this.process?.pid;
  }

  get running(): boolean {
    return this.process !== undefined;
  }

  /** Starts the postmaster; resolves once it accepts connections (read-only ones, for a hot standby). */
  start(): Promise<void> {
    const flags = [
      '-D',
      this.dataDir,
      '-p',
      String(this.port),
      ...Object.entries(this.settings).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
    ];
    const child = spawn(this.binaries.postgres, flags, { ...this.binaries.user, stdio: ['ignore', 'ignore', 'pipe'] });
    this.process = child;
    this.exited = new Promise((resolve) =>
      child.once('exit', () => {
        if (this.process === child) this.process = undefined;
        resolve();
      }),
    );
    return new Promise((resolve, reject) => {
      let output = '';
      let ready = false;
      child.stderr.on('data', (chunk: Buffer) => {
        this.log.write(chunk);
        if (ready) return;
        output += chunk.toString('utf8');
        if (/database system is ready to accept (read-only )?connections/.test(output)) {
          ready = true;
          resolve();
        }
      });
      child.once('error', (error) => !ready && reject(error));
      child.once('exit', (code, signal) => {
        if (!ready) {
          reject(new Error(`${this.name}: postgres exited at start (${signal ?? `exit ${code}`}): ${output.trim()}`));
        }
      });
    });
  }

  /** Immediate shutdown (SIGQUIT to the postmaster, as `pg_ctl stop -m immediate`): no checkpoint, no goodbye. */
  async crash(): Promise<void> {
    if (!this.process) return;
    this.process.kill('SIGQUIT');
    await this.exited;
  }

  /** Fast shutdown. */
  async stop(): Promise<void> {
    if (!this.process) return;
    this.process.kill('SIGINT');
    await this.exited;
  }
}

export interface ReplicatedPair {
  primary: PgNode;
  standby: PgNode;
  /** The replication link: standby → proxy → primary. */
  link: SwitchableProxy;
  /** "The database" clients connect to: → primary, re-pointed to the standby at the failover. */
  front: SwitchableProxy;
  /** URL of the failover database through `front`. */
  url: string;
  /** URL of the failover database on a node, bypassing `front` (for the checker and the suite's own moves). */
  urlOf(node: PgNode, database?: string): string;
  destroy(): Promise<void>;
}

export interface PairOptions {
  /** Called on the primary's failover database before the backup is taken (schema, tables). */
  prepare: (primaryUrl: string) => Promise<void>;
  /** Where the two server logs go. */
  logDir: string;
  /** Extra settings of both servers. */
  settings?: Record<string, string | number>;
}

/**
 * Copies a running data directory for the low-level backup API: everything except what the documentation says to
 * leave out (WAL, the postmaster's pid and options files, replication slots, temporary and runtime-only contents).
 * Files may change or vanish while they are copied; the backup label makes the standby replay WAL from the start of
 * the backup, which repairs torn pages (full_page_writes is on by default).
 */
export function copyDataDirectory(from: string, to: string, user: EmbeddedBinaries['user'], top = true): void {
  const emptied = new Set([
    'pg_wal',
    'pg_replslot',
    'pg_dynshmem',
    'pg_notify',
    'pg_serial',
    'pg_snapshots',
    'pg_stat_tmp',
    'pg_subtrans',
  ]);
  const skipped = new Set(['postmaster.pid', 'postmaster.opts', 'backup_label', 'tablespace_map']);
  let entries;
  try {
    entries = readdirSync(from, { withFileTypes: true });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw error;
  }
  for (const entry of entries) {
    const source = join(from, entry.name);
    const target = join(to, entry.name);
    if (top && skipped.has(entry.name)) continue;
    if (entry.name.startsWith('pgsql_tmp') || entry.name === 'pg_internal.init') continue;
    try {
      if (entry.isDirectory()) {
        mkdirSync(target, { mode: lstatSync(source).mode & 0o777 });
        if (user) chownSync(target, user.uid, user.gid);
        if (top && emptied.has(entry.name)) {
          if (entry.name === 'pg_wal') {
            mkdirSync(join(target, 'archive_status'), { mode: 0o700 });
            if (user) chownSync(join(target, 'archive_status'), user.uid, user.gid);
          }
          continue;
        }
        copyDataDirectory(source, target, user, false);
      } else if (entry.isSymbolicLink()) {
        symlinkSync(readlinkSync(source), target);
      } else {
        copyFileSync(source, target);
        if (user) chownSync(target, user.uid, user.gid);
      }
    } catch (error) {
      // Dropped or renamed by the running server while we copied: WAL replay recreates what matters.
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
}

async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, application_name: 'failover-suite' });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const until = performance.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (performance.now() > until) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** Starts a primary, prepares its failover database, and makes a streaming standby of it. */
export async function startReplicatedPair(options: PairOptions): Promise<ReplicatedPair> {
  const cleanup: string[] = [];
  const nodes: PgNode[] = [];
  const guards: Array<{ kill(): boolean }> = [];
  const proxies: SwitchableProxy[] = [];
  const logs: WriteStream[] = [];
  const destroy = async () => {
    for (const node of nodes) await node.stop().catch(() => undefined);
    for (const proxy of proxies) await proxy.stop().catch(() => undefined);
    for (const guard of guards) guard.kill();
    for (const log of logs) log.end();
    for (const path of cleanup) rmSync(path, { recursive: true, force: true });
  };
  try {
    const binaries = await embeddedBinaries(cleanup);
    const password = randomBytes(12).toString('hex');
    mkdirSync(options.logDir, { recursive: true });
    const makeNode = async (name: string, dataDir: string, settings: Record<string, string | number>) => {
      const log = createWriteStream(join(options.logDir, `${name}.log`));
      logs.push(log);
      const node = new PgNode(
        name,
        binaries,
        dataDir,
        await freePort(),
        {
          listen_addresses: '127.0.0.1',
          unix_socket_directories: '',
          max_connections: 200,
          ...options.settings,
          ...settings,
        },
        log,
      );
      nodes.push(node);
      return node;
    };
    const newDataDir = () => {
      // The parent first in `cleanup`: the watchdog of that server stops watching once it is gone.
      const parent = mkdtempSync(join(tmpdir(), 'nest-pg-lease-failover-'));
      cleanup.unshift(parent);
      chmodSync(parent, 0o755);
      const dataDir = join(parent, 'data');
      mkdirSync(dataDir, { mode: 0o700 });
      if (binaries.user) chownSync(dataDir, binaries.user.uid, binaries.user.gid);
      return { parent, dataDir };
    };
    const urlOf = (node: PgNode, database = DATABASE) =>
      `postgres://postgres:${password}@127.0.0.1:${node.port}/${database}`;

    const primaryDir = newDataDir();
    initCluster(binaries, primaryDir.dataDir, password);
    const primary = await makeNode('primary', primaryDir.dataDir, {});
    await primary.start();
    guards.push(removeWhenGone([primaryDir.parent], primary.pid));

    const admin = await connect(urlOf(primary, 'postgres'));
    try {
      await admin.query(`CREATE DATABASE ${DATABASE}`);
      await options.prepare(urlOf(primary));
      // Reserved now, so the WAL from before the backup's checkpoint stays until the standby has streamed it.
      await admin.query(`SELECT pg_create_physical_replication_slot($1, true)`, [SLOT]);

      const link = new SwitchableProxy('replication');
      proxies.push(link);
      await link.start(primary.port);

      // The low-level backup API: start and stop in one session, copy in between.
      const standbyDir = newDataDir();
      await admin.query(`SELECT pg_backup_start('failover-standby', true)`);
      copyDataDirectory(primaryDir.dataDir, standbyDir.dataDir, binaries.user);
      const {
        rows: [stop],
      } = await admin.query<{ labelfile: string; spcmapfile: string | null }>(
        `SELECT labelfile, spcmapfile FROM pg_backup_stop(false)`,
      );
      const own = (path: string) => binaries.user && chownSync(path, binaries.user.uid, binaries.user.gid);
      writeFileSync(join(standbyDir.dataDir, 'backup_label'), stop.labelfile, { mode: 0o600 });
      own(join(standbyDir.dataDir, 'backup_label'));
      if (stop.spcmapfile) {
        writeFileSync(join(standbyDir.dataDir, 'tablespace_map'), stop.spcmapfile, { mode: 0o600 });
        own(join(standbyDir.dataDir, 'tablespace_map'));
      }
      writeFileSync(join(standbyDir.dataDir, 'standby.signal'), '', { mode: 0o600 });
      own(join(standbyDir.dataDir, 'standby.signal'));

      const conninfo = `host=127.0.0.1 port=${link.port} user=postgres password=${password} application_name=${STANDBY_NAME}`;
      const standby = await makeNode('standby', standbyDir.dataDir, {
        primary_conninfo: conninfo,
        primary_slot_name: SLOT,
        hot_standby: 'on',
      });
      await standby.start();
      guards.push(removeWhenGone([standbyDir.parent], standby.pid));
      await waitForCatchUp(admin);

      const front = new SwitchableProxy('front');
      proxies.push(front);
      await front.start(primary.port);
      const url = `postgres://postgres:${password}@127.0.0.1:${front.port}/${DATABASE}`;
      return { primary, standby, link, front, url, urlOf, destroy };
    } finally {
      await admin.end().catch(() => undefined);
    }
  } catch (error) {
    await destroy();
    throw error;
  }
}

/** Waits until the standby streams and has replayed everything the primary has written so far. */
export async function waitForCatchUp(primaryAdmin: pg.Client, timeoutMs = 30_000): Promise<void> {
  await waitFor(
    'the standby to stream and catch up',
    async () => {
      const { rows } = await primaryAdmin.query<{ ok: boolean }>(
        `SELECT state = 'streaming' AND replay_lsn >= pg_current_wal_lsn() AS ok FROM pg_stat_replication
       WHERE application_name = $1`,
        [STANDBY_NAME],
      );
      return rows[0]?.ok ? true : undefined;
    },
    timeoutMs,
  );
}

/**
 * Makes the primary wait for the standby at every commit (`synchronous_standby_names`, with the default
 * `synchronous_commit = on`: the standby has flushed the commit's WAL before the client hears of it). Set on the
 * primary only (ALTER SYSTEM writes its own postgresql.auto.conf, which the standby's copy predates), so the promoted
 * standby, with no standby of its own, does not wait for one.
 */
export async function makeSynchronous(pair: ReplicatedPair): Promise<void> {
  const admin = await connect(pair.urlOf(pair.primary, 'postgres'));
  try {
    await admin.query(`ALTER SYSTEM SET synchronous_standby_names = '${STANDBY_NAME}'`);
    await admin.query(`SELECT pg_reload_conf()`);
    await waitFor('the standby to become synchronous', async () => {
      const { rows } = await admin.query<{ sync_state: string }>(
        `SELECT sync_state FROM pg_stat_replication WHERE application_name = $1`,
        [STANDBY_NAME],
      );
      return rows[0]?.sync_state === 'sync' ? true : undefined;
    });
  } finally {
    await admin.end();
  }
}

/** Promotes the standby (waits until it is out of recovery) and returns its new timeline. */
export async function promote(pair: ReplicatedPair): Promise<{ timeline: number }> {
  const admin = await connect(pair.urlOf(pair.standby, 'postgres'));
  try {
    const {
      rows: [done],
    } = await admin.query<{ promoted: boolean }>(`SELECT pg_promote(true, 60) AS promoted`);
    if (!done?.promoted) throw new Error('pg_promote did not complete within 60 s');
    const {
      rows: [info],
    } = await admin.query<{ timeline: string }>(
      `SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int::text AS timeline`,
    );
    return { timeline: Number(info.timeline) };
  } finally {
    await admin.end();
  }
}
