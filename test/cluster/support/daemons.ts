/**
 * The processes around a Patroni cluster, each from Debian's packages: etcd (Patroni's store), HAProxy (how the
 * application reaches the leader: Patroni's REST health check), and the suite's replica method (the low-level backup
 * API of the failover suite, `copyDataDirectory`, served to Patroni over loopback HTTP). A watchdog ends them all and
 * removes their directory when the test process is gone, even after a SIGKILL.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { chownSync, mkdirSync, type WriteStream, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import type { EmbeddedBinaries } from '@app/pg-harness';
import pg from 'pg';
import { copyDataDirectory } from '../../failover/support/cluster.js';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A daemon this suite started: its process and how it ended. */
export class Daemon {
  readonly exited: Promise<void>;

  constructor(
    readonly name: string,
    readonly child: ChildProcess,
    log: WriteStream,
  ) {
    child.stdout?.on('data', (chunk: Buffer) => log.write(chunk));
    child.stderr?.on('data', (chunk: Buffer) => log.write(chunk));
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    child.once('error', (error) => log.write(`${name}: ${String(error)}\n`));
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** SIGKILL (a test's daemon has nothing to save). */
  async kill(): Promise<void> {
    if (!this.alive) return;
    this.child.kill('SIGKILL');
    await this.exited;
  }

  /** SIGTERM, then SIGKILL after `graceMs`. */
  async stop(graceMs = 5_000): Promise<void> {
    if (!this.alive) return;
    this.child.kill('SIGTERM');
    const killed = setTimeout(() => this.alive && this.child.kill('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(killed);
  }
}

/** A single-member etcd on loopback (its data in `dir`). */
export function startEtcd(dir: string, clientPort: number, peerPort: number, log: WriteStream): Daemon {
  const client = `http://127.0.0.1:${clientPort}`;
  const peer = `http://127.0.0.1:${peerPort}`;
  const child = spawn(
    'etcd',
    [
      '--name=etcd1',
      `--data-dir=${join(dir, 'etcd')}`,
      `--listen-client-urls=${client}`,
      `--advertise-client-urls=${client}`,
      `--listen-peer-urls=${peer}`,
      `--initial-advertise-peer-urls=${peer}`,
      `--initial-cluster=etcd1=${peer}`,
      '--log-level=warn',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  return new Daemon('etcd', child, log);
}

/** Waits until etcd answers its health endpoint. */
export async function etcdReady(clientPort: number, timeoutMs = 20_000): Promise<void> {
  const until = performance.now() + timeoutMs;
  for (;;) {
    const healthy = await fetch(`http://127.0.0.1:${clientPort}/health`)
      .then(async (response) => response.ok && ((await response.json()) as { health?: string }).health === 'true')
      .catch(() => false);
    if (healthy) return;
    if (performance.now() > until) throw new Error(`etcd did not become healthy within ${timeoutMs} ms`);
    await sleep(100);
  }
}

export interface HaproxyServer {
  name: string;
  /** Where HAProxy sends the application's connections (the node's PostgreSQL, here through its gate). */
  port: number;
  /** Patroni's REST API of the node: `GET /primary` answers 200 on the leader only. */
  restPort: number;
}

/**
 * The HAProxy recipe (docs/cluster.md): TCP mode, every node a server, health-checked on Patroni's REST API
 * (`GET /primary`: 200 on the leader, 503 elsewhere) every 500 ms; a server marked down has its sessions shut, so the
 * application's connections to a former leader end at once and reconnect to the new one.
 */
export function haproxyConfig(port: number, servers: HaproxyServer[]): string {
  return [
    'global',
    '  maxconn 1000',
    'defaults',
    '  mode tcp',
    '  timeout connect 2s',
    // Idle pooled connections and the LISTEN connection stay open for as long as the application keeps them.
    '  timeout client 1h',
    '  timeout server 1h',
    '  timeout check 1s',
    'listen postgres_primary',
    `  bind 127.0.0.1:${port}`,
    '  option httpchk GET /primary',
    '  http-check expect status 200',
    '  default-server inter 500ms fall 1 rise 1 on-marked-down shutdown-sessions',
    ...servers.map((s) => `  server ${s.name} 127.0.0.1:${s.port} check port ${s.restPort}`),
    '',
  ].join('\n');
}

export function startHaproxy(configFile: string, log: WriteStream): Daemon {
  // -db: foreground, no daemon; the test process owns it.
  const child = spawn('haproxy', ['-db', '-f', configFile], { stdio: ['ignore', 'pipe', 'pipe'] });
  return new Daemon('haproxy', child, log);
}

/**
 * Patroni's replica method (`create_replica_methods: [lowlevel]`): Patroni runs `script` (as the server's user) with
 * `--datadir` and `--connstring` of the member to clone; the script asks this process, which copies the member's
 * running data directory with the failover suite's low-level backup (`pg_backup_start`, `copyDataDirectory`,
 * `pg_backup_stop`'s label). Debian's pg_basebackup (15) cannot back up the embedded PostgreSQL (18).
 */
export class ReplicaMaker {
  private server?: Server;
  port = 0;

  constructor(
    private readonly superuserPassword: string,
    private readonly user: EmbeddedBinaries['user'],
    private readonly log: WriteStream,
  ) {}

  async start(): Promise<void> {
    this.server = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
      request.on('end', () => {
        const { datadir, connstring } = JSON.parse(body) as { datadir: string; connstring: string };
        this.clone(datadir, connstring).then(
          () => response.writeHead(200).end('ok'),
          (error: unknown) => {
            this.log.write(`replica of ${connstring} into ${datadir} failed: ${String(error)}\n`);
            response.writeHead(500).end(String(error));
          },
        );
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
  }

  /** The script Patroni runs: posts its arguments here, exits 0 once the copy is made. */
  writeScript(path: string): void {
    writeFileSync(
      path,
      `#!/usr/bin/python3
import json, sys, urllib.request
args = dict(a[2:].split('=', 1) for a in sys.argv[1:] if a.startswith('--') and '=' in a)
body = json.dumps({'datadir': args['datadir'], 'connstring': args['connstring']}).encode()
request = urllib.request.Request('http://127.0.0.1:${this.port}/replica', data=body, method='POST')
with urllib.request.urlopen(request, timeout=120) as response:
    sys.exit(0 if response.status == 200 else 1)
`,
      { mode: 0o755 },
    );
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private async clone(datadir: string, connstring: string): Promise<void> {
    const params = Object.fromEntries(
      connstring
        .split(/\s+/)
        .filter((part) => part.includes('='))
        .map((part) => part.split('=', 2) as [string, string]),
    );
    const client = new pg.Client({
      host: params.host,
      port: Number(params.port),
      user: 'postgres',
      password: this.superuserPassword,
      database: 'postgres',
      application_name: 'cluster-replica-maker',
    });
    client.on('error', () => undefined);
    await client.connect();
    try {
      const {
        rows: [{ data_directory: source }],
      } = await client.query<{ data_directory: string }>('SHOW data_directory');
      await client.query(`SELECT pg_backup_start('patroni-replica', true)`);
      mkdirSync(datadir, { recursive: true, mode: 0o700 });
      if (this.user) chownSync(datadir, this.user.uid, this.user.gid);
      copyDataDirectory(source, datadir, this.user);
      const {
        rows: [stop],
      } = await client.query<{ labelfile: string; spcmapfile: string | null }>(
        `SELECT labelfile, spcmapfile FROM pg_backup_stop(false)`,
      );
      const write = (name: string, text: string) => {
        writeFileSync(join(datadir, name), text, { mode: 0o600 });
        if (this.user) chownSync(join(datadir, name), this.user.uid, this.user.gid);
      };
      write('backup_label', stop.labelfile);
      if (stop.spcmapfile) write('tablespace_map', stop.spcmapfile);
    } finally {
      await client.end().catch(() => undefined);
    }
  }
}

/**
 * Once this process is gone (even after SIGKILL): ends `pids` (SIGTERM, then SIGKILL), every postmaster whose
 * `postmaster.pid` is under `dir`, and removes `dir`. Stops watching once `dir` is gone.
 */
export function watchdog(dir: string, pids: () => number[]): { update(): void; kill(): void } {
  let child: ChildProcess | undefined;
  const update = () => {
    child?.kill();
    const list = pids().join(' ');
    const quoted = `'${dir.replace(/'/g, `'\\''`)}'`;
    const script = `while kill -0 ${process.pid} 2>/dev/null; do
  [ -e ${quoted} ] || exit 0
  sleep 1
done
kill -TERM ${list} 2>/dev/null; sleep 2; kill -KILL ${list} 2>/dev/null
for f in ${quoted}/*/data/postmaster.pid; do [ -f "$f" ] && kill -KILL "$(head -1 "$f")" 2>/dev/null; done
sleep 1
rm -rf ${quoted}`;
    child = spawn('sh', ['-c', script], { detached: true, stdio: 'ignore' });
    child.unref();
  };
  update();
  return { update, kill: () => child?.kill() };
}
