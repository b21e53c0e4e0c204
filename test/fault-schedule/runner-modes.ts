/**
 * The runner's side of the modes where two features meet (issue 38): the operator that drains a key (a `drain`
 * step), the immediate server stop of a `handoff-crash` step, and whom a `sticky` step aims at (the sticky job's
 * owner).
 */
import { readFileSync } from 'node:fs';
import { Logger } from '@nestjs/common';
import type pg from 'pg';
import { DataSource } from 'typeorm';
import { LEASE, sleep } from '../faults/support/harness.js';
import { LeaseOperator, LeaseService, leaseEntities, leaseMigrations } from '../../libs/lease/src/index.js';
import type { DrainWindow } from './checker-modes.js';

const OPERATOR = 'schedule-operator';
/** How long a drain or an undrain is tried again (the server may just have restarted: a pooled connection is stale). */
const RETRY_FOR_MS = 30_000;

async function retrying<T>(what: () => Promise<T>): Promise<T> {
  const until = Date.now() + RETRY_FOR_MS;
  for (;;) {
    try {
      return await what();
    } catch (error) {
      if (Date.now() > until) throw error;
      await sleep(200);
    }
  }
}

/**
 * The operator of the run: a `LeaseService` of its own (no proxy in front) and its `LeaseOperator`, once the
 * migration of the operator's tables ran (before any worker starts, so every worker's drains are on). Keeps every
 * drain's window.
 */
export class Drains {
  readonly windows: DrainWindow[] = [];

  private constructor(
    private readonly dataSource: DataSource,
    private readonly service: LeaseService,
    private readonly operator: LeaseOperator,
  ) {}

  static async open(url: string): Promise<Drains> {
    // The runner's console shows the schedule; the operator's warnings (a drain refresh failing while the server
    // restarts) are expected there, and its errors still print.
    Logger.overrideLogger(['error', 'fatal']);
    const dataSource = new DataSource({
      type: 'postgres',
      url,
      entities: [...leaseEntities],
      extra: { max: 2, application_name: OPERATOR },
    });
    await dataSource.initialize();
    const migration = leaseMigrations
      .map((Migration) => new Migration())
      .find((m) => /^CreateLeaseConsoleTables/.test(m.name!));
    const runner = dataSource.createQueryRunner();
    try {
      await migration!.up(runner);
    } finally {
      await runner.release();
    }
    const service = new LeaseService(dataSource, { ...LEASE, owner: OPERATOR });
    await service.init();
    return new Drains(dataSource, service, new LeaseOperator(service));
  }

  /** Drains `key` for `durationMs`, then undrains it; the window is from the drain's commit to the undrain's ask. */
  async drain(key: string, durationMs: number, step: number): Promise<void> {
    const action = { by: 'fault-schedule', reason: `step #${step}` };
    await retrying(() => this.operator.drain(key, action));
    const from = Date.now();
    try {
      await sleep(durationMs);
    } finally {
      this.windows.push({ key, from, to: Date.now() });
      await retrying(() => this.operator.undrain(key, action));
    }
  }

  /** Undrains whatever is still drained (the settling: every worker must be able to finish). */
  async undrainAll(): Promise<void> {
    for (const drain of await retrying(() => this.operator.drains())) {
      const action = { by: 'fault-schedule', reason: 'settling', template: drain.kind === 'template' };
      await retrying(() => this.operator.undrain(drain.subject, action));
    }
  }

  async close(): Promise<void> {
    await this.service.close().catch(() => undefined);
    await this.dataSource.destroy().catch(() => undefined);
  }
}

/**
 * The postmaster of the server `admin` is connected to: the parent of its backend (an embedded server on this
 * machine). An immediate stop is SIGQUIT to it (`pg_ctl stop -m immediate`): no checkpoint, so a commit that did not
 * wait for its WAL flush (`synchronous_commit = off`) is lost, as in a crash.
 */
export async function postmasterOf(admin: pg.Client): Promise<number> {
  const { rows } = await admin.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  const stat = readFileSync(`/proc/${rows[0].pid}/stat`, 'utf8');
  // pid (comm) state ppid …; comm may contain spaces or parentheses: read after the last ')'.
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

/** The owner of the live lease of `key` (the sticky job's term), if any. */
export async function ownerOf(admin: pg.Client, key: string): Promise<string | undefined> {
  const { rows } = await admin.query<{ owner: string }>(
    `SELECT owner FROM job_lease WHERE target_id = $1 AND lease_token IS NOT NULL
       AND updated_at + lease_timeout_ms * interval '1 millisecond' > clock_timestamp()`,
    [key],
  );
  return rows[0]?.owner;
}
