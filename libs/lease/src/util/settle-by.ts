import { MAX_TIMER_MS } from '../options/limits.js';

/**
 * Calls `callback` once `ms` have passed, however long that is: a delay past setTimeout's range is covered by a chain
 * of timers (a single one would fire at once). Returns the cancel function.
 */
export function longTimeout(callback: () => void, ms: number): () => void {
  const due = performance.now() + Math.max(0, ms);
  let timer: NodeJS.Timeout;
  const arm = () => {
    const left = due - performance.now();
    timer = setTimeout(left > MAX_TIMER_MS ? arm : callback, Math.min(Math.max(0, left), MAX_TIMER_MS));
  };
  arm();
  return () => clearTimeout(timer);
}

/**
 * Settles with `work`, unless `until` (monotonic) passes or `signal` aborts first: then rejects with `onTimeout()` or
 * the signal's reason, and hands a value that arrives later to `discard` (a late lease must be released). A wait
 * must settle on time even when the database stops answering in the middle of a statement.
 */
export async function settleBy<T>(
  work: Promise<T>,
  until: number,
  signal: AbortSignal | undefined,
  onTimeout: () => Error,
  discard: (late: T) => void = () => undefined,
): Promise<T> {
  let cancelTimer: (() => void) | undefined;
  let onAbort: (() => void) | undefined;
  const cutoff = new Promise<never>((_, reject) => {
    cancelTimer = longTimeout(() => reject(onTimeout()), until - performance.now());
    if (signal) {
      // An AbortSignal's reason is an Error (a DOMException by default, or what abort() was given: ours are Errors).
      onAbort = () => reject(signal.reason as Error);
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    }
  });
  let won = false;
  try {
    const value = await Promise.race([work, cutoff]);
    won = true;
    return value;
  } finally {
    cancelTimer?.();
    if (onAbort) signal?.removeEventListener('abort', onAbort);
    if (!won) work.then(discard, () => undefined);
  }
}

/**
 * One bounded step of a shutdown: waits for `work` at most `stepMs`, and never rejects — what fails or runs past the
 * bound is handed to `warn` (what it still holds expires by itself).
 */
export async function boundedStep(
  what: string,
  work: Promise<unknown>,
  stepMs: number,
  warn: (message: string) => void,
): Promise<void> {
  const giveUp = () => new Error(`${what} still in flight after ${stepMs} ms`);
  await settleBy(work, performance.now() + stepMs, undefined, giveUp).catch((error: unknown) =>
    warn(`Shutdown: ${String(error)}; what they hold expires by itself`),
  );
}
