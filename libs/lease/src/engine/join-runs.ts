/**
 * `onBusy: 'join'`: a call whose target is held by a run of the same key settles with that run's outcome instead of
 * running the work again. In this process the run's promise is shared (no statement beyond the holder's own); the
 * run's value must be JSON, so that a joiner in another process (see `JoinResults`) gets the same answer. A call
 * looks for a run to join before it attempts, and settles only with the run holding the target then or one acquiring
 * it later, never with a run that had ended (see `JoinResults`); a drained target refuses it at once, as any call.
 */
import { LeaseArgumentError, LeaseJoinedRunError, LeaseLostError, LeaseShutdownError } from '../errors/lease.errors.js';
import { LeaseBusyError, LeaseDrainedError, LeaseWaitTimeoutError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { Lease } from '../interfaces/lease.interface.js';
import type { EngineSettings } from '../options/engine-settings.js';
import type { LeaseCall } from '../options/busy-policy.js';
import type { JoinOutcome, JoinWatch, RemoteJoins, SettledOutcome } from '../core/backend.js';
import { settleBy } from '../util/settle-by.js';

/** A lease entered by the engine, and how to leave it (`LeaseEngine`'s `LeaseEntry`). */
interface LeaseEntry {
  readonly lease: Lease;
  readonly exit: () => Promise<void>;
}

/** What joining needs of the engine. */
export interface JoinHost {
  readonly options: EngineSettings;
  enter(call: LeaseCall): Promise<LeaseEntry>;
  within<T>(lease: Lease, work: () => T): T;
  /** The drains every attempt is checked against (`LeaseDrainedError`); absent, there are none. */
  readonly operator?: { admit(targetKey: string, keyTemplate: string): Promise<void> | undefined };
  /** Whether the call chain holds `targetKey` already (a reentrant call); absent, `enter` alone tells. */
  holdsInChain?(targetKey: string): boolean;
}

/** Why a value cannot be sent as JSON, or undefined when it can (undefined itself is allowed: a void run). */
export function jsonRefusal(value: unknown): string | undefined {
  try {
    JSON.stringify(value, (key, inner: unknown) => {
      if (typeof inner === 'function' || typeof inner === 'symbol') {
        throw new TypeError(`${key === '' ? 'the value' : `"${key}"`} is a ${typeof inner}`);
      }
      return inner;
    });
    return undefined;
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

/** An error's HTTP status and body, when it has them (an `HttpException`, duck-typed: the engine knows no HTTP). */
function httpOf(error: unknown): { status?: number; response?: unknown } {
  const http = error as { getStatus?: () => unknown; getResponse?: () => unknown } | null;
  if (typeof http?.getStatus !== 'function' || typeof http.getResponse !== 'function') return {};
  const status = http.getStatus();
  return typeof status === 'number' ? { status, response: http.getResponse() } : {};
}

/** The outcome of a joined run, as the joiner's own: the value, or a `LeaseJoinedRunError`. */
export function settleJoined(targetKey: string, outcome: SettledOutcome): unknown {
  if (outcome.kind === 'value') return outcome.value;
  const { message, fencingToken, cause, status, response } = outcome;
  throw new LeaseJoinedRunError(targetKey, fencingToken, message, { cause, status, response });
}

/** Settles with `work`, or rejects with the lease's abort reason (lost, shut down) as soon as its signal aborts. */
function untilAborted<T>(lease: Lease, work: Promise<T>): Promise<T> {
  return settleBy(work, Number.POSITIVE_INFINITY, lease.signal, () => new Error('unreachable'));
}

export class JoinRuns {
  /** The run of each key in this process that a join may share, from its attempt to its release. */
  private readonly running = new Map<string, Promise<JoinOutcome>>();
  /** Calls of each key waiting for another run's outcome now (in this process or another): a probe for tests. */
  private readonly joining = new Map<string, number>();

  constructor(
    private readonly host: JoinHost,
    /** Joins across processes; absent, a target held by another process is refused as without join. */
    private readonly remote?: RemoteJoins,
  ) {}

  /** How many calls of `targetKey` wait for another run's outcome now. */
  joinersOf(targetKey: string): number {
    return this.joining.get(targetKey) ?? 0;
  }

  /** Counts the call among the joiners of `targetKey` while `outcome` is pending. */
  private async joined<T>(targetKey: string, outcome: Promise<T>): Promise<T> {
    this.joining.set(targetKey, this.joinersOf(targetKey) + 1);
    try {
      return await outcome;
    } finally {
      const left = this.joinersOf(targetKey) - 1;
      if (left > 0) this.joining.set(targetKey, left);
      else this.joining.delete(targetKey);
    }
  }

  /** Ends the waits for other processes' outcomes and their LISTEN connection (the engine's close()). */
  close(): Promise<void> {
    return this.remote?.close() ?? Promise.resolve();
  }

  /**
   * `LeaseService.run` with `onBusy: 'join'` (and `@Exclusive` with it), its input checked already (a single-holder
   * request: see options/busy-policy.ts): see the file's note.
   */
  async run<T>(call: LeaseCall, work: (lease: Lease) => Promise<T> | T): Promise<T> {
    const { request, busy, signal } = call;
    const { targetKey, keyTemplate } = request;
    const joinTimeoutMs = (busy.kind === 'join' ? busy.timeoutMs : undefined) ?? this.host.options.defaultWaitTimeoutMs;
    const until = performance.now() + joinTimeoutMs;
    const onTimeout = () => new LeaseWaitTimeoutError(targetKey, joinTimeoutMs);
    // A join attempts and never queues: the priority line is for calls that run the work themselves (its priority
    // still ranks the attempt against live waiters: no barging).
    const attempt: LeaseCall = { request, busy: { kind: 'throw' }, signal };
    // A call chain holding the key runs the work inside its lease, as a reentrant run: it must not wait for its own
    // outcome (nor look for a run to join: it is the run), and a drain does not refuse it.
    if (this.host.holdsInChain?.(targetKey)) return this.reenter(work, attempt);
    const watch: JoinWatch = {};
    for (;;) {
      signal?.throwIfAborted();
      // A drained target refuses a join at once, as any call: never a stored outcome, never a wait for none.
      const admitting = this.host.operator?.admit(targetKey, keyTemplate);
      if (admitting) await admitting;
      const running = this.running.get(targetKey);
      if (running) {
        const outcome = await this.joined(targetKey, settleBy(running, until, signal, onTimeout));
        if (outcome.kind !== 'gone') return settleJoined(targetKey, outcome) as T;
        continue;
      }
      // Registered before the look: a duplicate arriving meanwhile shares it (and the attempt) instead of asking the
      // database.
      let settle!: (outcome: JoinOutcome) => void;
      const outcome = new Promise<JoinOutcome>((resolve) => (settle = resolve));
      this.running.set(targetKey, outcome);
      let entry: LeaseEntry;
      try {
        const joined = await this.joinRemote(targetKey, watch, until, signal, onTimeout);
        if (joined) {
          this.forget(targetKey, outcome);
          settle(joined);
          if (joined.kind !== 'gone') return settleJoined(targetKey, joined) as T;
          // The run joined ended without an outcome (not joinable, died, lost its lease): look again.
          continue;
        }
        entry = await this.host.enter(attempt);
      } catch (error) {
        this.forget(targetKey, outcome);
        settle({ kind: 'gone' });
        if (!(error instanceof LeaseBusyError) || error instanceof LeaseDrainedError || !this.remote) throw error;
        // Taken since the look (a run to join now), or a line ahead: the next look tells, or waits its poll.
        watch.refused = true;
        continue;
      }
      // A run ending without an outcome is forgotten at once, before its release: a local joiner that finds it
      // must not see it again (it would loop on the settled promise, in microtasks, while the release waits for I/O).
      const ended = (joinOutcome: JoinOutcome) => {
        if (joinOutcome.kind === 'gone') this.forget(targetKey, outcome);
        settle(joinOutcome);
      };
      try {
        return await this.hold(targetKey, entry, work, ended);
      } finally {
        this.forget(targetKey, outcome);
      }
    }
  }

  /**
   * A run of another process to join, found by a look: its outcome, `gone` when it ended without one, or undefined
   * when there is none (the target is free by the look: attempt). Counted among the joiners while it waits for one.
   */
  private async joinRemote(
    targetKey: string,
    watch: JoinWatch,
    until: number,
    signal: AbortSignal | undefined,
    onTimeout: () => Error,
  ): Promise<JoinOutcome | undefined> {
    if (!this.remote) return undefined;
    const seen = await this.remote.look(targetKey, watch, until, signal, onTimeout);
    if (seen.kind === 'free') return undefined;
    if (seen.kind !== 'run') return seen;
    const waiting = this.remote.await(targetKey, seen.fencingToken, watch, until, signal, onTimeout);
    return this.joined(targetKey, waiting);
  }

  /** A reentrant join: the work in the call chain's lease (borrowed), its outcome neither stored nor shared. */
  private async reenter<T>(work: (lease: Lease) => Promise<T> | T, attempt: LeaseCall): Promise<T> {
    const { lease, exit } = await this.host.enter(attempt);
    try {
      return await this.host.within(lease, () => work(lease));
    } finally {
      await exit();
    }
  }

  /** Runs the work under the lease, stores and shares its outcome (before the release), then releases. */
  private async hold<T>(
    targetKey: string,
    entry: LeaseEntry,
    work: (lease: Lease) => Promise<T> | T,
    settle: (outcome: JoinOutcome) => void,
  ): Promise<T> {
    const { lease } = entry;
    const { fencingToken } = lease;
    let outcome: JoinOutcome = { kind: 'gone' };
    try {
      const value = await untilAborted(lease, Promise.resolve(this.host.within(lease, () => work(lease))));
      const refusal = jsonRefusal(value);
      if (refusal !== undefined) {
        throw new LeaseArgumentError(messages.joinResultNotJson(targetKey, refusal), targetKey);
      }
      const done = { kind: 'value' as const, value, fencingToken };
      await this.remote?.save(lease, done);
      outcome = done;
      return value;
    } catch (error) {
      // A run that lost its lease has no outcome to share: its joiners try again (and may run the work themselves).
      if (error instanceof LeaseLostError || error instanceof LeaseShutdownError || lease.signal.aborted) throw error;
      const message = error instanceof Error ? error.message : String(error);
      const failed = { kind: 'error' as const, message, fencingToken, cause: error, ...httpOf(error) };
      // Stored like a value; when that fails (the lease lost meanwhile), the joiners try again.
      const saved = await (this.remote?.save(lease, failed) ?? Promise.resolve()).then(
        () => true,
        () => false,
      );
      if (saved) outcome = failed;
      throw error;
    } finally {
      settle(outcome);
      await entry.exit();
    }
  }

  private forget(targetKey: string, outcome: Promise<JoinOutcome>): void {
    if (this.running.get(targetKey) === outcome) this.running.delete(targetKey);
  }
}
