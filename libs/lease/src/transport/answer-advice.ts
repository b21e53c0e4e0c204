/**
 * The developer's half of an answer: a client is told what happened and when to retry (lease-answers.ts); the error's
 * own message — which option would have waited, which bound to raise, where to point the application — goes to the
 * log, once per key and error class per period, so a busy endpoint does not write a line per request.
 */
import { Logger } from '@nestjs/common';
import type { LeaseError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { Answer } from './lease-answers.js';

/** One advice line per key and error class per this period. */
export const ADVICE_PERIOD_MS = 60_000;
/** Keys remembered (the least recently advised go first: a key forgotten may be advised again early). */
const ADVICE_KEYS = 1_000;

// Named after the public class: that is the name users know from the log lines.
const logger = new Logger('LeaseService');
const lastAdvised = new Map<string, number>();

/** Logs `error`'s message for its answer, unless it was logged for this key and class within the period. */
export function adviseOnce(error: LeaseError, answer: Answer): void {
  // A 400's message is the client's own input problem (its body says it); a joined run's failure is the original's.
  if (answer.status === 400 || answer.title === 'Joined Run Failed') return;
  const name = `${error.name}\u0000${error.targetKey ?? ''}`;
  const now = performance.now();
  const last = lastAdvised.get(name);
  if (last !== undefined && now - last < ADVICE_PERIOD_MS) return;
  lastAdvised.delete(name);
  lastAdvised.set(name, now);
  if (lastAdvised.size > ADVICE_KEYS) lastAdvised.delete(lastAdvised.keys().next().value!);
  const line = messages.answerAdvice(answer.status, error.message, ADVICE_PERIOD_MS / 1000);
  if (answer.status >= 500 && answer.status !== 503) logger.error(line);
  else if (answer.status === 503) logger.warn(line);
  else logger.log(line);
}
