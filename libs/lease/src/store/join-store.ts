/**
 * Joins across processes (`onBusy: 'join'`): the outcome of a joinable run stored under its target and fencing token
 * (JSON, in the run's fenced transaction, kept `joinResultTtlMs`), and a joiner's wait for it — woken by a NOTIFY on
 * the result channel, with a poll every `waitPollIntervalMs` as the safety net (a lost notification, an expired
 * holder, which sends none).
 */
import type { Logger } from '@nestjs/common';
import type { LeaseDatabase } from '../database/lease-database.js';
import { Notifier } from '../database/notifier.js';
import { unavailableOr } from '../errors/database-errors.js';
import type { Lease } from '../interfaces/lease.interface.js';
import type { ResolvedLeaseOptions } from '../interfaces/lease-module-options.interface.js';
import { connectBoundMs, statementPoolBoundMs } from '../options/bounds.js';
import { leaseObjectNames } from '../schema/lease-schema.js';
import { settleBy } from '../util/settle-by.js';
import { readResultSql, saveResultSql } from './sql/join.sql.js';

/** How a run a call may join ended: with a value, with an error, or without an outcome (no run, or its lease lost). */
export type JoinOutcome =
  | { readonly kind: 'value'; readonly value: unknown; readonly fencingToken: bigint }
  | {
      readonly kind: 'error';
      readonly message: string;
      readonly fencingToken: bigint;
      readonly cause: unknown;
      readonly status?: number;
      readonly response?: unknown;
    }
  | { readonly kind: 'gone' };

/** An outcome a joiner can settle with. */
export type SettledOutcome = Exclude<JoinOutcome, { kind: 'gone' }>;

/** An outcome as stored: JSON, without the fencing token (the key) and with the cause reduced to its name. */
type StoredOutcome =
  | { kind: 'value'; value?: unknown }
  | { kind: 'error'; name: string; message: string; status?: number; response?: unknown };

/** What the joins need of the store; `JoinRuns` works without (one process only). */
export interface RemoteJoins {
  /** Stores the outcome of the run holding `lease` (fenced: only while the lease is ours; else it rejects). */
  save(lease: Lease, outcome: SettledOutcome): Promise<void>;
  /** Waits for the outcome of the run holding `targetKey` now; `gone` when it ended without one. */
  await(
    targetKey: string,
    until: number,
    signal: AbortSignal | undefined,
    onTimeout: () => Error,
  ): Promise<JoinOutcome>;
  close(): Promise<void>;
}

function stored(outcome: SettledOutcome): string {
  if (outcome.kind === 'value') return JSON.stringify({ kind: 'value', value: outcome.value });
  const name = outcome.cause instanceof Error ? outcome.cause.name : 'Error';
  const { message, status, response } = outcome;
  const http = status === undefined ? {} : { status, response };
  const base = { kind: 'error', name, message };
  try {
    return JSON.stringify({ ...base, ...http });
  } catch {
    // A response that is not JSON is left out: the duplicate then answers as for an unknown error.
    return JSON.stringify(base);
  }
}

function outcomeOf(text: string, fencingToken: bigint): SettledOutcome {
  const parsed = JSON.parse(text) as StoredOutcome;
  if (parsed.kind === 'value') return { kind: 'value', value: parsed.value, fencingToken };
  const { name, message, status, response } = parsed;
  return { kind: 'error', message, fencingToken, cause: { name, message }, status, response };
}

/** A joiner's look at a target (see `readResultSql`). */
interface ResultRow {
  token: string;
  live: boolean;
  outcome: string | null;
}

export class JoinResults implements RemoteJoins {
  private readonly names;
  private readonly saveSql: string;
  private readonly readSql: string;
  private notifier?: Notifier;
  /** The joiners waiting, by key: woken by a NOTIFY of the key, or all at once after a (re)connect. */
  private readonly waiting = new Map<string, Set<() => void>>();
  private closed = false;

  constructor(
    private readonly database: LeaseDatabase,
    private readonly options: ResolvedLeaseOptions,
    private readonly logger: Logger,
  ) {
    this.names = leaseObjectNames(options);
    this.saveSql = saveResultSql(this.names);
    this.readSql = readResultSql(this.names);
  }

  async save(lease: Lease, outcome: SettledOutcome): Promise<void> {
    const values = [
      lease.targetKey,
      String(lease.fencingToken),
      stored(outcome),
      this.options.joinResultTtlMs,
      this.names.resultChannel,
    ];
    await lease.fenced((manager) => manager.query(this.saveSql, values));
  }

  async await(
    targetKey: string,
    until: number,
    signal: AbortSignal | undefined,
    onTimeout: () => Error,
  ): Promise<JoinOutcome> {
    this.listen();
    let token: string | null = null;
    let woken = () => undefined as void;
    const wake = () => woken();
    const wakes = this.waiting.get(targetKey) ?? this.waiting.set(targetKey, new Set()).get(targetKey)!;
    wakes.add(wake);
    try {
      for (;;) {
        // Armed before the read: a NOTIFY landing while it runs is not missed.
        const nudged = new Promise<void>((resolve) => (woken = resolve));
        const row: ResultRow | undefined = await settleBy(this.read(targetKey, token), until, signal, onTimeout);
        if (!row) return { kind: 'gone' };
        const joined: string = token ?? row.token;
        token = joined;
        if (row.outcome !== null) return outcomeOf(row.outcome, BigInt(joined));
        if (!row.live || row.token !== joined || this.closed) return { kind: 'gone' };
        const pollMs = this.options.waitPollIntervalMs * (0.5 + Math.random() / 2);
        const poll = new Promise<void>((resolve) => setTimeout(resolve, pollMs).unref());
        await settleBy(Promise.race([nudged, poll]), until, signal, onTimeout);
      }
    } finally {
      wakes.delete(wake);
      if (wakes.size === 0) this.waiting.delete(targetKey);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const wakes of this.waiting.values()) for (const wake of wakes) wake();
    await this.notifier?.close();
  }

  private async read(targetKey: string, token: string | null): Promise<ResultRow | undefined> {
    const { rows } = await this.database.statements
      .query<ResultRow>({
        text: this.readSql,
        values: [targetKey, token],
        query_timeout: statementPoolBoundMs(this.options),
      })
      .catch((error: unknown) => {
        throw unavailableOr(error, targetKey, 'join the run holding');
      });
    return rows[0];
  }

  /** The LISTEN connection of join results, opened by the first join that waits for another process. */
  private listen(): void {
    if (this.notifier || !this.options.notify || this.closed) return;
    const wakeAll = () => {
      for (const wakes of this.waiting.values()) for (const wake of wakes) wake();
    };
    this.notifier = new Notifier(
      () => this.database.sessionConfig('listen'),
      this.names.resultChannel,
      (targetKey) => this.waiting.get(targetKey)?.forEach((wake) => wake()),
      wakeAll,
      this.logger,
      connectBoundMs(this.options),
    );
    void this.notifier.start();
  }
}
