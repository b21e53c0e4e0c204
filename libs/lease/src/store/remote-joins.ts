/**
 * Joins across processes (`onBusy: 'join'`): the outcome of a joinable run stored under its target and fencing token
 * (JSON, in the run's fenced transaction, kept `joinResultTtlMs`), a joiner's look for a run to join, and its wait for
 * that run's outcome — woken by a NOTIFY on the result channel, with a poll every `waitPollIntervalMs` as the safety
 * net (a lost notification, an expired holder, which sends none).
 *
 * Which run a joiner may settle with: the run holding the target at its first look, or one that acquired the target
 * after that look (a larger fencing token) — never one that had ended before the call came, whose outcome may still be
 * stored. A target taken by no live run (a hold's tail, a line ahead) has no run to join: the look waits — until the
 * tail ends (the look says when), a NOTIFY, or its poll — as a waiter does, and never asks the database in a loop.
 */
import type { Logger } from '@nestjs/common';
import type { LeaseDatabase } from '../database/lease-database.js';
import { Notifier } from '../database/notifier.js';
import { unavailableOr } from '../errors/database-errors.js';
import type { Lease } from '../interfaces/lease.interface.js';
import type { EngineSettings } from '../options/engine-settings.js';
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

/** What a look found: a live run to join (its fencing token), the outcome of a run to settle with, or no run (`free`). */
export type JoinLook =
  SettledOutcome | { readonly kind: 'run'; readonly fencingToken: bigint } | { readonly kind: 'free' };

/** What one join call has seen of its target, across its looks and attempts (see the file's note). */
export interface JoinWatch {
  /**
   * The fencing token of a run the call must never settle with: the target's last run when the call first looked and
   * found no live holder (0 for a target without a row), or a run it joined that ended without an outcome. A run
   * under a larger token acquired the target after that.
   */
  floor?: bigint;
  /** The call's last attempt was refused though its look found no run: the next look waits a poll before `free`. */
  refused?: boolean;
}

/** An outcome as stored: JSON, without the fencing token (the key) and with the cause reduced to its name. */
type StoredOutcome =
  | { kind: 'value'; value?: unknown }
  | { kind: 'error'; name: string; message: string; status?: number; response?: unknown };

/** What the joins need of the store; `JoinRuns` works without (one process only). */
export interface RemoteJoins {
  /** Stores the outcome of the run holding `lease` (fenced: only while the lease is ours; else it rejects). */
  save(lease: Lease, outcome: SettledOutcome): Promise<void>;
  /** Looks for a run of `targetKey` to join, waiting while there is none and the target is not free (see the note). */
  look(
    targetKey: string,
    watch: JoinWatch,
    until: number,
    signal: AbortSignal | undefined,
    onTimeout: () => Error,
  ): Promise<JoinLook>;
  /** Waits for the outcome of the run under `fencingToken`; `gone` (and the watch's floor raised) when it has none. */
  await(
    targetKey: string,
    fencingToken: bigint,
    watch: JoinWatch,
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
export interface ResultRow {
  token: string;
  live: boolean;
  outcome: string | null;
  hold_left_ms: number | null;
}

/**
 * What a look's row offers the call (see `JoinWatch`): a run to join or its outcome, or undefined when there is no run
 * the call may settle with (the floor then set).
 */
export function runSeen(row: ResultRow | undefined, watch: JoinWatch): JoinLook | undefined {
  if (!row) {
    watch.floor ??= 0n;
    return undefined;
  }
  const token = BigInt(row.token);
  // On the first look only the live holder is the call's; afterwards any run acquired since (a larger token).
  const since = watch.floor === undefined ? row.live : token > watch.floor;
  if (since && row.outcome !== null) return outcomeOf(row.outcome, token);
  if (since && row.live) return { kind: 'run', fencingToken: token };
  // Ended before the call came, or since without an outcome (a run that was not joinable, or lost its lease).
  watch.floor = watch.floor === undefined || token > watch.floor ? token : watch.floor;
  return undefined;
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
    private readonly options: EngineSettings,
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

  async look(
    targetKey: string,
    watch: JoinWatch,
    until: number,
    signal: AbortSignal | undefined,
    onTimeout: () => Error,
  ): Promise<JoinLook> {
    return this.nudgedBy(targetKey, async (nudge) => {
      for (;;) {
        if (this.closed) return { kind: 'free' };
        // Armed before the read: a NOTIFY landing while it runs is not missed.
        const nudged = nudge();
        const row = await settleBy(this.read(targetKey, null), until, signal, onTimeout);
        const floor = watch.floor;
        const seen = runSeen(row, watch);
        if (seen) return seen;
        // A run that came and went since the last look explains a refusal: no line ahead to wait for.
        if (watch.floor !== floor) watch.refused = false;
        const holdLeftMs = row?.hold_left_ms ?? null;
        // Free by the look: attempt — unless the last attempt was refused (a line ahead): a poll first.
        if (holdLeftMs === null && !watch.refused) return { kind: 'free' };
        watch.refused = false;
        // A hold's tail ends with no NOTIFY: wake for its end (a few ms after, the database clock decides).
        const pollMs = this.pollMs();
        await this.pause(
          nudged,
          holdLeftMs === null ? pollMs : Math.min(pollMs, holdLeftMs + 5),
          until,
          signal,
          onTimeout,
        );
      }
    });
  }

  async await(
    targetKey: string,
    fencingToken: bigint,
    watch: JoinWatch,
    until: number,
    signal: AbortSignal | undefined,
    onTimeout: () => Error,
  ): Promise<JoinOutcome> {
    return this.nudgedBy(targetKey, async (nudge) => {
      this.listen();
      const token = String(fencingToken);
      for (;;) {
        // Armed before the read: a NOTIFY landing while it runs is not missed.
        const nudged = nudge();
        const row = this.closed ? undefined : await settleBy(this.read(targetKey, token), until, signal, onTimeout);
        if (row && row.outcome !== null) return outcomeOf(row.outcome, fencingToken);
        // Ended without an outcome (not joinable, or its lease lost), or shutdown: the call looks again.
        if (!row?.live || row.token !== token) {
          if (watch.floor === undefined || fencingToken > watch.floor) watch.floor = fencingToken;
          return { kind: 'gone' };
        }
        await this.pause(nudged, this.pollMs(), until, signal, onTimeout);
      }
    });
  }

  /**
   * Runs `waiting` with the wake-ups of `targetKey` (a NOTIFY of the key, a reconnect, close()): each `nudge()` arms a
   * promise the next wake-up resolves.
   */
  private async nudgedBy<T>(targetKey: string, waiting: (nudge: () => Promise<void>) => Promise<T>): Promise<T> {
    let woken = () => undefined as void;
    const wake = () => woken();
    const wakes = this.waiting.get(targetKey) ?? this.waiting.set(targetKey, new Set()).get(targetKey)!;
    wakes.add(wake);
    try {
      return await waiting(() => new Promise<void>((resolve) => (woken = resolve)));
    } finally {
      wakes.delete(wake);
      if (wakes.size === 0) this.waiting.delete(targetKey);
    }
  }

  /** The jittered poll of a joiner: between half and all of `waitPollIntervalMs`. */
  private pollMs(): number {
    return this.options.waitPollIntervalMs * (0.5 + Math.random() / 2);
  }

  /** Sleeps `ms`, or until `nudged` (a NOTIFY): the LISTEN connection is opened by the first joiner that waits. */
  private async pause(
    nudged: Promise<void>,
    ms: number,
    until: number,
    signal: AbortSignal | undefined,
    onTimeout: () => Error,
  ): Promise<void> {
    this.listen();
    let timer: NodeJS.Timeout | undefined;
    const slept = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
    timer?.unref();
    try {
      await settleBy(Promise.race([nudged, slept]), until, signal, onTimeout);
    } finally {
      clearTimeout(timer);
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
