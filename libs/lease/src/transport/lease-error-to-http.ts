import { HttpException } from '@nestjs/common';
import { LeaseError, LeaseJoinedRunError } from '../errors/lease.errors.js';
import { adviseOnce } from './answer-advice.js';
import { answerOf, retryAfterSeconds } from './lease-answers.js';

function setHeader(response: unknown, name: string, value: string): void {
  const target = response as { setHeader?: (n: string, v: string) => void; header?: (n: string, v: string) => void };
  if (typeof target?.setHeader === 'function') target.setHeader(name, value);
  else if (typeof target?.header === 'function') target.header(name, value);
}

/**
 * Maps a lease error to an HTTP exception (other errors pass through unchanged), with `Retry-After` on `response`
 * where the answer has one. The body's `message` is for the client (what happened, when to retry); the error's own
 * message, with its advice for the developer, is logged once per key and error class per minute. The only place that
 * knows about HTTP.
 */
export function leaseErrorToHttp(error: unknown, response?: unknown): unknown {
  if (!(error instanceof LeaseError) || error instanceof HttpException) return error;
  // A duplicate answers what the original answered: its HTTP status and body, or Nest's answer to an unknown error.
  if (error instanceof LeaseJoinedRunError) {
    const { status, response: body } = error;
    return status === undefined
      ? new HttpException({ statusCode: 500, message: 'Internal server error' }, 500, { cause: error })
      : new HttpException(body as string | Record<string, unknown>, status, { cause: error });
  }
  const answer = answerOf(error);
  adviseOnce(error, answer);
  const body: Record<string, unknown> = {
    statusCode: answer.status,
    error: answer.title,
    message: answer.message,
    code: error.name,
    targetKey: error.targetKey,
    ...answer.extra,
  };
  if (answer.retryAfterMs !== undefined) {
    const seconds = retryAfterSeconds(answer.retryAfterMs);
    setHeader(response, 'Retry-After', String(seconds));
    body.retryAfterSeconds = seconds;
  }
  return new HttpException(body, answer.status, { cause: error });
}
