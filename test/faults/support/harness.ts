/**
 * The fault harness: real worker processes (`worker.ts` under `node --import tsx`), the tables they write, and the
 * fault tools that need the database (backend kills). Scenario files combine these with the checker.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { createWriteStream, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { resolveLeaseOptions, schemaStatements } from '../../../libs/lease/src/internal.js';
import type { LeaseModuleOptions } from 'nest-pg-lease';
import type { Command, LoopPlan, ParentMessage, WorkerConfig, WorkerMessage } from './protocol.js';

export const ARTIFACTS = join(process.cwd(), 'artifacts', 'faults');

/** The script a `Worker` runs (under `node --import tsx`) and the folder its output goes to (`<name>.log`). */
export interface WorkerScript {
  path: string;
  artifacts: string;
}

/** This suite's worker; the fault schedule (test/fault-schedule) runs its own through the same class. */
const FAULT_WORKER: WorkerScript = {
  path: join(process.cwd(), 'test', 'faults', 'support', 'worker.ts'),
  artifacts: ARTIFACTS,
};

/** What every worker sends: `ready` once it can be driven, `reply` to a command (`{ t: 'reply', id, ok, … }`). */
export interface AnyWorkerMessage {
  t: string;
}

/** A message from a worker with the parent's monotonic receipt time (the only clock the timing checks compare). */
export interface Received<M extends AnyWorkerMessage = WorkerMessage> {
  at: number;
  worker: string;
  msg: M;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The history and counter tables of the checker, plus the lease tables (made once here, not raced by workers). */
export async function prepareTables(url: string, keys: string[]): Promise<void> {
  const client = await connect(url);
  try {
    for (const statement of schemaStatements(resolveLeaseOptions({}))) await client.query(statement);
    await client.query(`CREATE SEQUENCE fault_commit_seq AS bigint`);
    await client.query(`CREATE TABLE fault_history (
      op_id uuid PRIMARY KEY, target text NOT NULL, fencing_token bigint NOT NULL, worker text NOT NULL,
      commit_seq bigint NOT NULL, at timestamptz NOT NULL)`);
    await client.query(`CREATE TABLE fault_counter (target text PRIMARY KEY, n bigint NOT NULL)`);
    await client.query(`INSERT INTO fault_counter SELECT unnest($1::text[]), 0`, [keys]);
  } finally {
    await client.end();
  }
}

export async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, application_name: 'fault-harness' });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

export class Worker<M extends AnyWorkerMessage = WorkerMessage, P extends object = ParentMessage> {
  readonly exited: Promise<number | null>;
  private readonly listeners = new Set<() => void>();
  private nextId = 1;
  private alive = true;
  private exit = '';

  private constructor(
    readonly name: string,
    private readonly child: ChildProcess,
    private readonly log: Received<M>[],
    private readonly artifacts: string,
  ) {
    this.exited = new Promise((resolve) =>
      child.once('exit', (code, signal) => {
        this.alive = false;
        this.exit = signal ?? `code ${code}`;
        resolve(code);
        this.notify();
      }),
    );
    child.on('message', (msg: M) => {
      log.push({ at: performance.now(), worker: name, msg });
      this.notify();
    });
  }

  /** Forks a worker of this suite and waits until its LeaseService is ready. `log` is shared by a fleet, so order is global. */
  static start(config: WorkerConfig, log: Received[] = []): Promise<Worker> {
    return Worker.startScript(FAULT_WORKER, config, log);
  }

  /**
   * Forks the worker `script` with `config` (JSON in argv[2], as this suite's) and waits for its `ready` message; a
   * worker not ready within `readyTimeoutMs` is killed.
   */
  static async startScript<M extends AnyWorkerMessage, P extends object>(
    script: WorkerScript,
    config: { name: string },
    log: Received<M>[] = [],
    readyTimeoutMs = 30_000,
  ): Promise<Worker<M, P>> {
    mkdirSync(script.artifacts, { recursive: true });
    const child = fork(script.path, [JSON.stringify(config)], {
      execArgv: ['--import', 'tsx'],
      cwd: process.cwd(),
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      env: { ...process.env, NODE_OPTIONS: '' },
    });
    const out = createWriteStream(join(script.artifacts, `${config.name}.log`));
    child.stdout!.pipe(out);
    child.stderr!.pipe(out);
    const worker = new Worker<M, P>(config.name, child, log, script.artifacts);
    try {
      await worker.waitFor((m) => m.t === 'ready', 'ready', readyTimeoutMs);
    } catch (error) {
      worker.signal('SIGKILL');
      throw error;
    }
    return worker;
  }

  get pid(): number {
    return this.child.pid!;
  }

  get running(): boolean {
    return this.alive;
  }

  messages(): Received<M>[] {
    return this.log.filter((r) => r.worker === this.name);
  }

  /** Resolves with the first message of this worker (already received or future) matching `predicate`. */
  waitFor(predicate: (msg: M) => boolean, what: string, timeoutMs = 15_000, since = 0): Promise<Received<M>> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = this.log.find((r) => r.worker === this.name && r.at >= since && predicate(r.msg));
        if (found) return finish(() => resolve(found));
        if (!this.alive)
          return finish(() =>
            reject(
              new Error(
                `${this.name} exited (${this.exit}) while waiting for ${what}; its output is in ${join(this.artifacts, `${this.name}.log`)}`,
              ),
            ),
          );
      };
      const timer = setTimeout(
        () => finish(() => reject(new Error(`${this.name}: timed out after ${timeoutMs} ms waiting for ${what}`))),
        timeoutMs,
      );
      const finish = (settle: () => void) => {
        clearTimeout(timer);
        this.listeners.delete(check);
        settle();
      };
      this.listeners.add(check);
      check();
    });
  }

  /** Sends a command (scripted mode) and resolves with its result; rejects with the worker's error text. */
  async command<T = unknown>(cmd: Command, timeoutMs = 20_000): Promise<T> {
    const id = this.nextId++;
    this.send({ t: 'cmd', id, cmd });
    const isReply = (m: AnyWorkerMessage): m is Extract<WorkerMessage, { t: 'reply' }> =>
      m.t === 'reply' && (m as { id?: number }).id === id;
    const { msg } = await this.waitFor(isReply, `reply to ${cmd.op}`, timeoutMs);
    if (!isReply(msg)) throw new Error('unreachable');
    if (!msg.ok) throw new Error(msg.error);
    return msg.value as T;
  }

  post(message: P): void {
    this.send(message);
  }

  private send(message: object): void {
    // The worker may be leaving at this very moment: a message it can no longer receive is moot.
    if (this.alive && this.child.connected) this.child.send(message, () => undefined);
  }

  signal(signal: NodeJS.Signals): void {
    if (this.alive) process.kill(this.pid, signal);
  }

  /** Ends the worker: asks politely, then SIGKILLs (and un-stops it first, so a SIGSTOPped worker dies too). */
  async end(graceMs = 10_000): Promise<void> {
    if (!this.alive) return;
    this.send({ t: 'cmd', id: 0, cmd: { op: 'exit' } });
    this.send({ t: 'stop' });
    const timer = setTimeout(() => {
      this.signal('SIGKILL');
      this.signal('SIGCONT');
    }, graceMs);
    await this.exited;
    clearTimeout(timer);
  }

  private notify(): void {
    for (const listener of [...this.listeners]) listener();
  }
}

export interface FleetOptions {
  url: string;
  processes: number;
  plan: LoopPlan;
  lease: LeaseModuleOptions;
  unfenced?: boolean;
  /** Name prefix; process i is `${prefix}-${i}` (also its application_name). */
  prefix: string;
  /** `url` of process i (e.g. one of them through the proxy). */
  urlOf?: (index: number) => string;
}

/**
 * Worker options used by the scenarios unless they say otherwise: short leases, generous ratios, and no shutdown
 * grace — the scenarios race close() against the calls in flight (the drain has suites of its own).
 */
export const LEASE: LeaseModuleOptions = {
  timing: {
    heartbeatIntervalMs: 150,
    leaseTimeoutMs: 1_500,
    waiterTimeoutMs: 1_500,
    waitPollIntervalMs: 150,
    shutdownGraceMs: 0,
  },
};

/** Starts `processes` looping workers, runs `during(workers)` while they loop, and waits for all of them to finish. */
export async function runFleet(
  options: FleetOptions,
  during: (workers: Worker[], log: Received[]) => Promise<void> = async () => undefined,
): Promise<{ log: Received[]; workers: Worker[]; wallMs: number }> {
  const log: Received[] = [];
  const started = performance.now();
  const workers = await Promise.all(
    Array.from({ length: options.processes }, (_, index) =>
      Worker.start(
        {
          name: `${options.prefix}-${index}`,
          url: options.urlOf?.(index) ?? options.url,
          lease: options.lease,
          poolSize: options.plan.loops + 2,
          unfenced: options.unfenced ?? false,
          loop: options.plan,
          maxLifetimeMs: options.plan.durationMs + 60_000,
        },
        log,
      ),
    ),
  );
  try {
    await during(workers, log);
    await Promise.all(workers.map((w) => w.waitFor((m) => m.t === 'done', 'done', options.plan.durationMs + 30_000)));
    return { log, workers, wallMs: performance.now() - started };
  } finally {
    await Promise.all(workers.map((w) => w.end()));
  }
}

/** Ends the backends of workers whose application_name starts with `prefix` (and matches `where`); returns how many. */
export async function terminateBackends(admin: pg.Client, prefix: string, where = 'true'): Promise<number> {
  const { rows } = await admin.query(
    `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
     WHERE application_name LIKE $1 || '%' AND pid <> pg_backend_pid() AND (${where})`,
    [prefix],
  );
  return rows[0].n;
}

/** SIGSTOPs `worker` for `ms`, then SIGCONTs it. */
export async function pause(worker: Worker, ms: number): Promise<void> {
  worker.signal('SIGSTOP');
  try {
    await sleep(ms);
  } finally {
    worker.signal('SIGCONT');
  }
}

/** A worker that obeys commands (acquire, write, release) instead of looping. */
export function startScripted(
  name: string,
  url: string,
  log: Received[],
  lease: LeaseModuleOptions = LEASE,
): Promise<Worker> {
  return Worker.start({ name, url, lease, poolSize: 4, unfenced: false, maxLifetimeMs: 120_000 }, log);
}

/** Milliseconds, rounded, for the summary. */
export const ms = (value: number) => String(Math.round(value));
