/**
 * Three PostgreSQL nodes managed by Patroni (Debian's package) over a single-member etcd, the application reaching
 * the leader through HAProxy with Patroni's REST health check. PostgreSQL is the embedded server every other suite
 * runs (`bin_dir` holds its `postgres`, `pg_ctl` and `initdb`; the package ships nothing else), plus Debian's
 * `pg_controldata` and `pg_isready`, which Patroni also calls: `pg_isready` speaks the protocol only, and Debian 12's
 * `pg_controldata` (15) prints the fields Patroni reads from the embedded server's control file correctly (it warns
 * that the checksum of a newer layout does not match). Replicas are made by the failover suite's low-level backup
 * (daemons.ts: `ReplicaMaker`). As root, Patroni and so PostgreSQL run as the `postgres` user, like the other suites'
 * servers.
 *
 * Each Patroni reaches etcd through a proxy of its own (`etcdLink`: blackholed, the node is cut off from the store),
 * and HAProxy reaches each node's PostgreSQL through a gate (closed, new connections are refused) so the suite can
 * read a promoted node's rows before any client reaches it.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, createWriteStream, existsSync, mkdirSync, mkdtempSync, readdirSync } from 'node:fs';
import { readFileSync, rmSync, symlinkSync, writeFileSync, type WriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { embeddedBinaries, type EmbeddedBinaries, freePort } from '@app/pg-harness';
import { SwitchableProxy } from '../../failover/support/proxy.js';
import {
  type Daemon,
  Daemon as DaemonClass,
  etcdReady,
  haproxyConfig,
  ReplicaMaker,
  startEtcd,
  startHaproxy,
  watchdog,
} from './daemons.js';

const run = promisify(execFile);
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Patroni's timing (the brief's budget): leader key TTL 10 s, a loop every second, DCS retries for 4 s. */
export const PATRONI_DCS = { ttl: 10, loop_wait: 1, retry_timeout: 4 } as const;

export interface PatroniNode {
  name: string;
  pgPort: number;
  restPort: number;
  dir: string;
  dataDir: string;
  configFile: string;
  /** Patroni → etcd. */
  etcdLink: SwitchableProxy;
  /** HAProxy → PostgreSQL. */
  gate: SwitchableProxy;
  patroni: Daemon;
}

export interface Member {
  name: string;
  /** 'leader', 'sync_standby', 'replica' (or a later version's names). */
  role: string;
  state: string;
  timeline?: number;
}

/** Debian's PostgreSQL tools Patroni calls besides the embedded ones (the newest major installed). */
function debianTool(name: string): string {
  const root = '/usr/lib/postgresql';
  const majors = existsSync(root)
    ? readdirSync(root)
        .filter((v) => existsSync(join(root, v, 'bin', name)))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (majors.length === 0) {
    throw new Error(`${name} not found under ${root}: apt-get install postgresql (see .ci/run)`);
  }
  return join(root, majors[0], 'bin', name);
}

export class PatroniCluster {
  readonly nodes: PatroniNode[] = [];
  private readonly daemons: Daemon[] = [];
  private readonly logs: WriteStream[] = [];
  private readonly proxies: SwitchableProxy[] = [];
  private readonly cleanup: string[] = [];
  private guard?: { update(): void; kill(): void };
  private replicaMaker?: ReplicaMaker;
  private root = '';
  haproxyPort = 0;
  readonly password = randomBytes(12).toString('hex');

  private constructor(private readonly logDir: string) {}

  /** Starts etcd, three Patroni nodes (one bootstraps, two clone it) and HAProxy; resolves once HAProxy routes. */
  static async start(logDir: string, synchronous: boolean): Promise<PatroniCluster> {
    const cluster = new PatroniCluster(logDir);
    try {
      await cluster.boot(synchronous);
      return cluster;
    } catch (error) {
      await cluster.destroy();
      throw error;
    }
  }

  /** URL through HAProxy: how the application reaches "the database". */
  url(database: string, user = 'postgres', password = this.password): string {
    return `postgres://${user}:${password}@127.0.0.1:${this.haproxyPort}/${database}`;
  }

  /** URL of one node's PostgreSQL, bypassing HAProxy and the gate (the suite's own reads). */
  urlOf(node: PatroniNode, database = 'postgres'): string {
    return `postgres://postgres:${this.password}@127.0.0.1:${node.pgPort}/${database}`;
  }

  node(name: string): PatroniNode {
    const node = this.nodes.find((n) => n.name === name);
    if (!node) throw new Error(`no node ${name}`);
    return node;
  }

  /** Patroni's view of the members (`GET /cluster` on the first node that answers). */
  async members(): Promise<Member[]> {
    for (const node of this.nodes) {
      const members = await fetch(`http://127.0.0.1:${node.restPort}/cluster`, { signal: AbortSignal.timeout(2_000) })
        .then(async (r) => ((await r.json()) as { members: Member[] }).members)
        .catch(() => undefined);
      if (members) return members;
    }
    throw new Error('no Patroni REST API answered /cluster');
  }

  /** Waits until there is a leader and, in synchronous mode, a synchronous standby streaming from it. */
  async settled(synchronous: boolean, timeoutMs = 60_000): Promise<{ leader: PatroniNode; sync?: PatroniNode }> {
    const until = performance.now() + timeoutMs;
    for (;;) {
      const members = await this.members().catch(() => []);
      const leader = members.find((m) => m.role === 'leader' && m.state === 'running');
      // Patroni 3.0 (Debian 12) reports a replica 'running'; later versions 'streaming'.
      const up = (m: Member) => m.state === 'running' || m.state === 'streaming';
      const sync = members.find((m) => m.role === 'sync_standby' && up(m));
      const streaming = members.filter((m) => m.role !== 'leader' && up(m)).length;
      if (leader && streaming === this.nodes.length - 1 && (!synchronous || sync)) {
        return { leader: this.node(leader.name), sync: sync && this.node(sync.name) };
      }
      if (performance.now() > until) {
        throw new Error(`the cluster did not settle within ${timeoutMs} ms: ${JSON.stringify(members)}`);
      }
      await sleep(200);
    }
  }

  /** The leader's postmaster pid (first line of postmaster.pid). */
  postmasterPid(node: PatroniNode): number {
    return Number(readFileSync(join(node.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  }

  /** `patronictl switchover`, as an operator runs it. */
  async switchover(leader: PatroniNode, candidate: PatroniNode): Promise<string> {
    const { stdout } = await run(
      'patronictl',
      ['-c', leader.configFile, 'switchover', '--leader', leader.name, '--candidate', candidate.name, '--force'],
      { timeout: 60_000, env: { ...process.env, LANG: 'C.UTF-8', LC_ALL: 'C.UTF-8' } },
    );
    return stdout;
  }

  /**
   * After a scenario: every node reconnected to etcd and reachable through its gate, then (Patroni rejoins the former
   * leader: a replica again, cloned anew where its history diverged) a leader, a synchronous standby and every other
   * node a running replica.
   */
  async restore(synchronous: boolean): Promise<void> {
    for (const node of this.nodes) {
      node.etcdLink.cut();
      node.gate.point(node.pgPort);
    }
    await this.settled(synchronous, 90_000);
  }

  async destroy(): Promise<void> {
    // Nothing to keep: Patroni killed (its orderly stop checkpoints and hands over), each postmaster stopped at once.
    await Promise.all(this.nodes.map((node) => node.patroni.kill().catch(() => undefined)));
    for (const node of this.nodes) {
      if (!existsSync(join(node.dataDir, 'postmaster.pid'))) continue;
      try {
        process.kill(this.postmasterPid(node), 'SIGQUIT');
      } catch {
        // gone already
      }
    }
    await sleep(500);
    for (const daemon of this.daemons) await daemon.stop().catch(() => undefined);
    for (const proxy of this.proxies) await proxy.stop().catch(() => undefined);
    await this.replicaMaker?.stop();
    for (const log of this.logs) log.end();
    this.guard?.kill();
    for (const path of this.cleanup) rmSync(path, { recursive: true, force: true });
  }

  private log(name: string): WriteStream {
    const log = createWriteStream(join(this.logDir, `${name}.log`));
    this.logs.push(log);
    return log;
  }

  private async boot(synchronous: boolean): Promise<void> {
    mkdirSync(this.logDir, { recursive: true });
    const binaries = await embeddedBinaries(this.cleanup);
    const user = binaries.user;
    const own = (path: string) => user && chownSync(path, user.uid, user.gid);
    this.root = mkdtempSync(join(tmpdir(), 'nest-pg-lease-cluster-'));
    this.cleanup.unshift(this.root);
    chmodSync(this.root, 0o755);
    own(this.root);
    this.guard = watchdog(this.root, () => this.daemons.map((d) => d.pid ?? 0).filter(Boolean));

    const [etcdClient, etcdPeer] = [await freePort(), await freePort()];
    this.daemons.push(startEtcd(this.root, etcdClient, etcdPeer, this.log('etcd')));
    this.guard.update();
    await etcdReady(etcdClient);

    this.replicaMaker = new ReplicaMaker(this.password, user, this.log('replica-maker'));
    await this.replicaMaker.start();
    const script = join(this.root, 'replica.py');
    this.replicaMaker.writeScript(script);
    const binDir = this.binDir(binaries);

    for (let i = 1; i <= 3; i++) {
      const name = `node${i}`;
      const dir = join(this.root, name);
      mkdirSync(dir, { mode: 0o700 });
      own(dir);
      const etcdLink = new SwitchableProxy(`${name}-etcd`);
      const gate = new SwitchableProxy(`${name}-gate`);
      this.proxies.push(etcdLink, gate);
      await etcdLink.start(etcdClient);
      const pgPort = await freePort();
      const restPort = await freePort();
      await gate.start(pgPort);
      const configFile = join(dir, 'patroni.yml');
      writeFileSync(
        configFile,
        JSON.stringify(
          this.patroniConfig({ name, dir, pgPort, restPort, etcdPort: etcdLink.port, binDir, script, synchronous }),
          null,
          2,
        ),
      );
      own(configFile);
      const patroni = this.startPatroni(name, configFile, dir, user);
      this.nodes.push({ name, pgPort, restPort, dir, dataDir: join(dir, 'data'), configFile, etcdLink, gate, patroni });
      this.guard.update();
      // The first node bootstraps the cluster; the others clone it once it holds the leader key.
      if (i === 1) await this.settledLeader();
    }

    this.haproxyPort = await freePort();
    const haproxyFile = join(this.root, 'haproxy.cfg');
    writeFileSync(
      haproxyFile,
      haproxyConfig(
        this.haproxyPort,
        this.nodes.map((n) => ({ name: n.name, port: n.gate.port, restPort: n.restPort })),
      ),
    );
    this.daemons.push(startHaproxy(haproxyFile, this.log('haproxy')));
    this.guard.update();
    await this.settled(synchronous);
  }

  private async settledLeader(timeoutMs = 60_000): Promise<void> {
    const until = performance.now() + timeoutMs;
    while (!(await this.members().catch(() => [])).some((m) => m.role === 'leader' && m.state === 'running')) {
      if (performance.now() > until) throw new Error(`no leader bootstrapped within ${timeoutMs} ms`);
      await sleep(200);
    }
  }

  private binDir(binaries: EmbeddedBinaries): string {
    const bin = join(this.root, 'bin');
    mkdirSync(bin, { mode: 0o755 });
    for (const name of ['postgres', 'pg_ctl', 'initdb']) symlinkSync(join(binaries.bin, name), join(bin, name));
    for (const name of ['pg_controldata', 'pg_isready']) symlinkSync(debianTool(name), join(bin, name));
    return bin;
  }

  private startPatroni(name: string, configFile: string, dir: string, user: EmbeddedBinaries['user']): Daemon {
    const child: ChildProcess = spawn('/usr/bin/patroni', [configFile], {
      ...user,
      cwd: dir,
      env: { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8', LC_ALL: 'C.UTF-8', HOME: dir },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const daemon = new DaemonClass(`patroni ${name}`, child, this.log(name));
    this.daemons.push(daemon);
    return daemon;
  }

  private patroniConfig(n: {
    name: string;
    dir: string;
    pgPort: number;
    restPort: number;
    etcdPort: number;
    binDir: string;
    script: string;
    synchronous: boolean;
  }): object {
    return {
      scope: 'nest-pg-lease',
      name: n.name,
      restapi: { listen: `127.0.0.1:${n.restPort}`, connect_address: `127.0.0.1:${n.restPort}` },
      // use_proxies: talk to this address only (no discovery of etcd's own client URLs, which bypass the link).
      etcd3: { hosts: [`127.0.0.1:${n.etcdPort}`], use_proxies: true },
      bootstrap: {
        dcs: {
          ...PATRONI_DCS,
          // A crashed primary fails over at once instead of restarting in place (the default waits 300 s).
          primary_start_timeout: 0,
          synchronous_mode: n.synchronous,
          maximum_lag_on_failover: 1_048_576,
          postgresql: {
            use_pg_rewind: false,
            use_slots: true,
            parameters: {
              max_connections: 200,
              max_wal_senders: 10,
              max_replication_slots: 10,
              wal_keep_size: '256MB',
            },
          },
        },
        initdb: [{ encoding: 'UTF8' }, { locale: 'C' }, { 'auth-host': 'scram-sha-256' }, { 'auth-local': 'trust' }],
        pg_hba: ['host replication replicator 127.0.0.1/32 scram-sha-256', 'host all all 127.0.0.1/32 scram-sha-256'],
      },
      postgresql: {
        listen: `127.0.0.1:${n.pgPort}`,
        connect_address: `127.0.0.1:${n.pgPort}`,
        data_dir: join(n.dir, 'data'),
        bin_dir: n.binDir,
        pgpass: join(n.dir, 'pgpass'),
        authentication: {
          superuser: { username: 'postgres', password: this.password },
          replication: { username: 'replicator', password: this.password },
        },
        parameters: { unix_socket_directories: n.dir },
        // No pg_rewind of the embedded version: a former leader whose history diverged is cloned again.
        use_pg_rewind: false,
        remove_data_directory_on_rewind_failure: true,
        remove_data_directory_on_diverged_timelines: true,
        create_replica_methods: ['lowlevel'],
        lowlevel: { command: `/usr/bin/python3 ${n.script}` },
      },
    };
  }
}
