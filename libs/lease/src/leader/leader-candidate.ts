import type { ServiceEngine } from '../engine/service-engine.js';
import { Logger } from '@nestjs/common';
import { LeaseLostError, LeaseShutdownError, LeaseWaitTimeoutError } from '../errors/lease.errors.js';
import type { ElectOptions, LeadershipEndReason, Leadership } from '../interfaces/leader-election.interface.js';
import type { Lease } from '../interfaces/lease.interface.js';
import { INT32_MAX } from '../options/limits.js';
import { TermTurns } from './term-turns.js';

/** After a failure the candidate tries again after 1 s, doubling up to 30 s (after an `onElected` throw: 1 s). */
const RETRY_DELAY_MS = 1_000;
const MAX_RETRY_DELAY_MS = 30_000;

/**
 * One candidate for a key's leadership: a waiter in the key's priority line, with no wait timeout (a wait of the
 * longest allowed length, renewed); elected = granted; the lease's signal aborting = revoked, then back in line. A
 * database that fails is retried with a doubling delay, logged, never thrown.
 */
export class LeaderCandidate implements Leadership {
  /** The calls using the term, one at a time (a sticky `@Exclusive`). */
  readonly turns = new TermTurns();
  private readonly logger = new Logger('LeaderElection');
  private readonly stopper = new AbortController();
  private term?: Lease;
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
    options.signal?.addEventListener('abort', () => void this.stop(), { once: true });
    this.loop = this.run();
  }

  get isLeader(): boolean {
    return this.term?.isHeld() ?? false;
  }

  get lease(): Lease | undefined {
    return this.isLeader ? this.term : undefined;
  }

  async stop(): Promise<void> {
    if (!this.stopper.signal.aborted) this.stopper.abort(new LeaseShutdownError(this.targetKey, 'cancelled'));
    await this.term?.release();
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
    while (!this.stopped) {
      let lease: Lease | null;
      try {
        // The first round tries once before waiting, so `firstAttempt` knows whether this candidate leads.
        lease = first ? await this.engine.tryAcquire(this.targetKey, { priority, keyTemplate }) : null;
        first = false;
        this.firstSettled();
        lease ??= await this.engine.acquire(this.targetKey, {
          priority,
          keyTemplate,
          waitTimeoutMs: INT32_MAX,
          signal,
        });
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
    try {
      await this.options.onElected?.(lease);
    } catch (error) {
      this.logger.error(`onElected of "${targetKey}" threw; resigning: ${String(error)}`);
      reason = 'resigned';
    }
    if (!reason) await ended(lease.signal, this.stopper.signal);
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
    try {
      await this.options.onRevoked?.(reason);
    } catch (error) {
      this.logger.error(`onRevoked of "${targetKey}" threw: ${String(error)}`);
    }
    if (reason === 'resigned') await pause(RETRY_DELAY_MS, this.stopper.signal);
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
