/**
 * Three (or more) leader-election children (`leader-child.ts`) and what they report, for the leader specs: every
 * message kept in arrival order with the child's name, and the history table of fenced writes.
 */
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type pg from 'pg';
import { startChild } from '../support/processes.js';

const CHILD = join(process.cwd(), 'test/leader/leader-child.ts');

export interface Report {
  type: 'ready' | 'elected' | 'revoked' | 'refused';
  name: string;
  token?: string;
  reason?: string;
  at: number;
}

export class Cluster {
  readonly reports: Report[] = [];
  readonly children = new Map<string, ChildProcess>();
  private readonly listeners = new Set<() => void>();

  constructor(
    private readonly url: string,
    readonly key: string,
    readonly table: string,
    private readonly options: Record<string, unknown>,
  ) {}

  static async create(admin: pg.Client, url: string, key: string, options: Record<string, unknown>): Promise<Cluster> {
    const table = `history_${key.replace(/\W/g, '_')}`;
    await admin.query(
      `CREATE TABLE ${table} (id bigserial PRIMARY KEY, token bigint NOT NULL, instance text NOT NULL,
         seq int NOT NULL, at bigint NOT NULL)`,
    );
    return new Cluster(url, key, table, options);
  }

  /** Starts a child and resolves once its application is up. */
  async start(name: string, priority = 0): Promise<void> {
    const child = startChild(CHILD, {
      LEADER_CHILD: { url: this.url, name, key: this.key, priority, table: this.table, options: this.options },
    });
    this.children.set(name, child.process);
    child.process.on('message', (message: Omit<Report, 'name'>) => {
      this.reports.push({ ...message, name });
      for (const listener of this.listeners) listener();
    });
    await child.message('ready', 60_000);
  }

  /** The first report after index `from` that matches, waiting up to `timeoutMs`. */
  next(match: (report: Report) => boolean, from = 0, timeoutMs = 30_000): Promise<Report> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = this.reports.slice(from).find(match);
        if (found) {
          this.listeners.delete(check);
          clearTimeout(timer);
          resolve(found);
        }
      };
      const timer = setTimeout(() => {
        this.listeners.delete(check);
        reject(new Error(`no matching report within ${timeoutMs} ms: ${JSON.stringify(this.reports)}`));
      }, timeoutMs);
      this.listeners.add(check);
      check();
    });
  }

  elected(from = 0, timeoutMs?: number): Promise<Report> {
    return this.next((report) => report.type === 'elected', from, timeoutMs);
  }

  /** The history of fenced writes, in the order their transactions took the lease row's lock. */
  async history(admin: pg.Client): Promise<Array<{ token: bigint; instance: string }>> {
    const { rows } = await admin.query<{ token: string; instance: string }>(
      `SELECT token, instance FROM ${this.table} ORDER BY id`,
    );
    return rows.map((row) => ({ token: BigInt(row.token), instance: row.instance }));
  }

  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    for (const child of this.children.values())
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  }
}

/**
 * At most one leader at a time, by the history: the writes of distinct terms never interleave (each term's writes
 * precede every later term's), terms rise, and each term belongs to one instance.
 */
export function checkHistory(history: Array<{ token: bigint; instance: string }>): string[] {
  const problems: string[] = [];
  const owners = new Map<bigint, string>();
  for (let i = 0; i < history.length; i++) {
    const { token, instance } = history[i];
    if (i > 0 && token < history[i - 1].token)
      problems.push(`write ${i}: term ${token} after term ${history[i - 1].token}`);
    const owner = owners.get(token);
    if (owner !== undefined && owner !== instance) problems.push(`term ${token} written by ${owner} and ${instance}`);
    owners.set(token, instance);
  }
  return problems;
}
