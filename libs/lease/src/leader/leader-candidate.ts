import type { ServiceEngine } from '../engine/service-engine.js';
import { Logger } from '@nestjs/common';
import { LeaseLostError, LeaseShutdownError, LeaseWaitTimeoutError } from '../errors/lease.errors.js';
import type { ElectOptions, LeadershipEndReason, Leadership } from '../interfaces/leader-election.interface.js';
import type { Lease } from '../interfaces/lease.interface.js';
import { callRequest } from '../options/call-input.js';
import { INT32_MAX } from '../options/limits.js';
import { longTimeout } from '../util/settle-by.js';
import { TermTurns } from './term-turns.js';

/** After a failure the candidate tries again after 1 s, doubling up to 30 s (after an `onElected` throw: 1 s). */
const RETRY_DELAY_MS = 1_000;
const MAX_RETRY_DELAY_MS = 30_000;

/** How a user callback settled: `threw` with what it threw, or not. */
type Settled = { threw: false } | { threw: true; error: unknown };

/**
 * One candidate for a key's leadership: a waiter in the key's priority line, with no wait timeout (a wait of the
 * longest allowed length, renewed); elected = granted; the lease's signal aborting = revoked, then back in line. A
 * database that fails is retried with a doubling delay, logged, never thrown. The term never waits for a user
 * callback: it ends when its lease's signal aborts or the candidate stops (the callback hears it by the signal); a
 * stopped candidate waits for its callbacks no longer than `shutdownGraceMs`.
 */
export class LeaderCandidate implements Leadership {
  /** The calls using the term, one at a time (a `@Sticky` method); a stop waits for the one in progress. */
  readonly turns = new TermTurns();
  private readonly logger = new Logger('LeaderElection');
  private readonly stopper = new AbortController();
  private term?: Lease;
  /** Resolves `shutdownGraceMs` after `stop()`: a stopped candidate waits no longer for a user callback. */
  private readonly graceOver: Promise<void>;
  private endGrace!: () => void;
  private cancelGrace?: () => void;
  private readonly loop: Promise<void>;
  /** Settles when the candidate has left the line for good. */
  get ended(): Promise<void> {
    return this.loop;
  }
  /** Settles after the first attempt: elected, or in line (or stopped). */
  readonly firstAttempt: Promise<void>;
  private firstSettled!: () => void;

  constructor(
    private readonly engine: ServiceEngine,
    readonly targetKey: string,
    private readonly options: ElectOptions = {},
  ) {
    this.firstAttempt = new Promise((resolve) => (this.firstSettled = resolve));
    this.graceOver = new Promise((resolve) => (this.endGrace = resolve));
    options.signal?.addEventListener('abort', () => void this.stop(), { once: true });
    this.loop = this.run().finally(() => this.cancelGrace?.());
  }

  get isLeader(): boolean {
    return this.term?.isHeld() ?? false;
  }

  get lease(): Lease | undefined {
    return this.isLeader ? this.term : undefined;
  }

  /**
   * Leaves the line. A leader hands over at once — unless a call is using the term (a `@Sticky` call in
   * progress): then when that call ends, or when the service's drain ends and releases the lease.
   */
  async stop(): Promise<void> {
    if (!this.stopper.signal.aborted) {
      this.stopper.abort(new LeaseShutdownError(this.targetKey, 'cancelled'));
      this.turns.close(new LeaseShutdownError(this.targetKey));
      this.cancelGrace = longTimeout(this.endGrace, this.engine.options.shutdownGraceMs);
    }
    await this.loop;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.stop();
  }

  private get stopped(): boolean {
    return this.stopper.signal.aborted;
  }

  private async run(): Promise<void> {
    let failures = 0;
    let first = true;
    const keyTemplate = this.options.keyTemplate ?? this.targetKey;
    const priority = this.options.priority ?? 0;
    const signal = this.stopper.signal;
    // A candidate always waits (the longest wait a timer allows, renewed): there is no busy policy to choose.
    const request = callRequest(this.targetKey, { priority, keyTemplate });
    const inLine = { request, busy: { kind: 'wait', timeoutMs: INT32_MAX }, signal } as const;
    while (!this.stopped) {
      let lease: Lease | null;
      try {
        // The first round tries once before waiting, so `firstAttempt` knows whether this candidate leads.
        lease = first ? await this.engine.tryAcquire(request) : null;
        first = false;
        this.firstSettled();
        lease ??= await this.engine.acquire(inLine);
        failures = 0;
      } catch (error) {
        first = false;
        this.firstSettled();
        if (this.stopped || error instanceof LeaseShutdownError) break;
        if (error instanceof LeaseWaitTimeoutError) continue;
        failures += 1;
        const delayMs = Math.min(RETRY_DELAY_MS * 2 ** (failures - 1), MAX_RETRY_DELAY_MS);
        this.logger.warn(`Candidate for "${this.targetKey}": ${String(error)}; in line again in ${delayMs} ms`);
        await pause(delayMs, signal);
        continue;
      }
      await this.lead(lease, keyTemplate, priority);
    }
    this.firstSettled();
  }

  /** One term: elected, until the lease's signal aborts (lost, released) or the candidate stops. */
  private async lead(lease: Lease, keyTemplate: string, priority: number): Promise<void> {
    if (this.stopped) return void (await lease.release());
    this.term = lease;
    const startedAt = performance.now();
    const { fencingToken, targetKey } = lease;
    this.engine.emit({ type: 'elected', targetKey, keyTemplate, fencingToken, priority, at: new Date() });
    this.logger.log(`Elected leader of "${targetKey}" (term ${fencingToken}, owner ${this.engine.options.owner})`);
    let reason: LeadershipEndReason | undefined;
    // The term does not wait for onElected: a stop hands over while it runs (it hears so by lease.signal).
    const elected = settle(() => this.options.onElected?.(lease));
    const early = await Promise.race([elected, ended(lease.signal, this.stopper.signal)]);
    if (early?.threw) {
      this.logger.error(`onElected of "${targetKey}" threw; resigning: ${String(early.error)}`);
      reason = 'resigned';
    } else {
      await ended(lease.signal, this.stopper.signal);
      // A call using the term (a @Sticky call in progress) keeps it through a stop, as the drain keeps any call's
      // lease: until the call ends, or the drain's grace ends and the service releases the lease.
      if (this.stopped) await Promise.race([this.turns.idle(), ended(lease.signal)]);
    }
    const cause: unknown = lease.signal.aborted ? lease.signal.reason : undefined;
    reason ??= this.stopped
      ? 'stopped'
      : cause instanceof LeaseLostError && cause.reason !== 'released'
        ? cause.reason
        : 'shutdown';
    this.term = undefined;
    // Handed over at once: the release wakes the next candidate by NOTIFY.
    await lease.release();
    this.engine.emit({
      type: 'revoked',
      targetKey,
      keyTemplate,
      fencingToken,
      reason,
      heldMs: performance.now() - startedAt,
      at: new Date(),
    });
    this.logger.log(`Leadership of "${targetKey}" ended (term ${fencingToken}): ${reason}`);
    const endReason = reason;
    const revoked = await this.awaitCallback(
      'onRevoked',
      settle(() => this.options.onRevoked?.(endReason)),
    );
    if (revoked?.threw) this.logger.error(`onRevoked of "${targetKey}" threw: ${String(revoked.error)}`);
    // The next term's onElected never runs beside this one's.
    const late = early ? undefined : await this.awaitCallback('onElected', elected);
    if (late?.threw) this.logger.error(`onElected of "${targetKey}" threw after its term ended: ${String(late.error)}`);
    if (reason === 'resigned') await pause(RETRY_DELAY_MS, this.stopper.signal);
  }

  /**
   * Waits for a user callback: as long as it runs while the candidate stands; once stopped, no longer than
   * `shutdownGraceMs` after the stop (undefined then: the callback is left running, its throw logged).
   */
  private async awaitCallback(name: string, callback: Promise<Settled>): Promise<Settled | undefined> {
    const settled = await Promise.race([callback, this.graceOver.then(() => undefined)]);
    if (settled) return settled;
    const graceMs = this.engine.options.shutdownGraceMs;
    this.logger.warn(`${name} of "${this.targetKey}" still running ${graceMs} ms (shutdownGraceMs) after stop(): left`);
    void callback.then((outcome) => {
      if (outcome.threw) this.logger.error(`${name} of "${this.targetKey}" threw: ${String(outcome.error)}`);
    });
    return undefined;
  }
}

/** Calls a user callback; never throws nor rejects: settles with what it threw, if it did. */
function settle(callback: () => unknown): Promise<Settled> {
  try {
    return Promise.resolve(callback()).then(
      (): Settled => ({ threw: false }),
      (error: unknown): Settled => ({ threw: true, error }),
    );
  } catch (error) {
    return Promise.resolve({ threw: true, error });
  }
}

/** Resolves when either signal aborts. */
function ended(...signals: AbortSignal[]): Promise<void> {
  return new Promise((resolve) => {
    if (signals.some((signal) => signal.aborted)) return resolve();
    for (const signal of signals) signal.addEventListener('abort', () => resolve(), { once: true });
  });
}

/** Waits `ms` (unref'd), or until `signal` aborts. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    timer.unref();
    signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
  });
}
