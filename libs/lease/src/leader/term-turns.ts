import { LeaseWaitTimeoutError } from '../errors/lease.errors.js';
import { longTimeout } from '../util/settle-by.js';

interface Waiting {
  readonly priority: number;
  readonly take: () => void;
  readonly fail: (error: unknown) => void;
}

/**
 * The calls of a term, one at a time (a `@Sticky` method): the term's lease keeps the other instances out, and the
 * turn keeps a call that overlaps a running one on this instance from running beside it. A call takes the free turn,
 * or waits in this process's line — higher priority first, first come first served within one — until the turn is
 * given back, its wait times out, its signal aborts, or the turns close (the owner stops).
 */
export class TermTurns {
  private taken = false;
  private readonly line: Waiting[] = [];
  private idlers: Array<() => void> = [];
  private closedWith?: Error;

  /** A call holds the turn. */
  get busy(): boolean {
    return this.taken;
  }

  /** Takes the turn when it is free and nobody waits for it. */
  tryTake(): boolean {
    if (this.taken || this.line.length > 0 || this.closedWith) return false;
    this.taken = true;
    return true;
  }

  /**
   * Takes the turn, waiting for it up to `waitTimeoutMs`: rejects with `LeaseWaitTimeoutError`, the signal's reason,
   * or the error the turns were closed with.
   */
  take(targetKey: string, priority: number, waitTimeoutMs: number, signal?: AbortSignal): Promise<void> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    if (signal?.aborted) return Promise.reject(signal.reason as Error);
    if (this.tryTake()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const leave = () => {
        cancel();
        signal?.removeEventListener('abort', onAbort);
        this.line.splice(this.line.indexOf(waiting), 1);
      };
      const waiting: Waiting = {
        priority,
        take: () => (leave(), resolve()),
        fail: (error) => (leave(), reject(error)),
      };
      const cancel = longTimeout(
        () => waiting.fail(new LeaseWaitTimeoutError(targetKey, waitTimeoutMs)),
        waitTimeoutMs,
      );
      const onAbort = () => waiting.fail(signal!.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      // Behind every call of its priority or higher: first come first served within a priority.
      const behind = this.line.findIndex((other) => other.priority < priority);
      this.line.splice(behind === -1 ? this.line.length : behind, 0, waiting);
    });
  }

  /** Gives the turn back: to the head of the line, or free (then whoever waits for idleness hears it). */
  give(): void {
    const next = this.line[0];
    if (next && !this.closedWith) return next.take();
    this.taken = false;
    for (const idle of this.idlers.splice(0)) idle();
  }

  /** Resolves once no call holds the turn. */
  idle(): Promise<void> {
    if (!this.taken) return Promise.resolve();
    return new Promise((resolve) => this.idlers.push(resolve));
  }

  /** The owner stops: the waiting calls end with `error`, and no call takes a turn from now on. */
  close(error: Error): void {
    this.closedWith ??= error;
    for (const waiting of [...this.line]) waiting.fail(error);
  }
}
