import { readFileSync } from 'node:fs';
import { HttpException } from '@nestjs/common';
import * as api from '../index.js';
import { LeaseError } from '../errors/lease.errors.js';
import { leaseErrorToHttp } from './lease-error-to-http.js';
import { leaseErrorBody } from './transport-errors.js';
import { answerOf } from './lease-answers.js';
import { busyError } from '../engine/acquisition-route.js';

/** One instance of every error class the package exports (the test fails when a new class is not listed here). */
const samples: Record<string, LeaseError> = {
  LeaseBusyError: new api.LeaseBusyError('k', 2_500),
  LeaseQueueFullError: new api.LeaseQueueFullError('k', 2_500, 'too many waiters'),
  LeaseDrainedError: new api.LeaseDrainedError('k', 1_000, { kind: 'key', subject: 'k', reason: 'maintenance' }),
  LeaseArgumentError: new api.LeaseArgumentError('waitTimeoutMs must be …'),
  LeaseKeyError: new api.LeaseKeyError('A target key must not be empty'),
  LeaseLostError: new api.LeaseLostError('k', 'taken-over'),
  LeaseWaitTimeoutError: new api.LeaseWaitTimeoutError('k', 4_200),
  LeaseUnavailableError: new api.LeaseUnavailableError('k', 'ECONNREFUSED', { kind: 'failing' }),
  LeaseShutdownError: new api.LeaseShutdownError('k'),
  LeaseConfigError: new api.LeaseConfigError('bad options'),
  LeaseJoinedRunError: new api.LeaseJoinedRunError('k', 7n, 'internal detail of the original'),
  LeaseLimitConflictError: new api.LeaseLimitConflictError('k', 2, 4),
};

interface Row {
  status: number;
  retryAfter: boolean;
  wsFields: string[];
}

/** The table of docs/errors-and-http.md ("The answers"), by class name. */
function docsTable(): Map<string, Row> {
  const page = readFileSync(new URL('../../../../docs/errors-and-http.md', import.meta.url), 'utf8');
  const section = page.slice(page.indexOf('| error | when |'));
  const rows = new Map<string, Row>();
  for (const line of section.split('\n').slice(2)) {
    if (!line.startsWith('| `')) break;
    const [, name, , http, ws] = line.split(/\s*\|\s*/);
    rows.set(name.match(/^`(\w+)`/)![1], {
      status: Number(http.match(/\b(\d{3})\b/)![1]),
      retryAfter: http.includes('Retry-After'),
      wsFields: [...ws.matchAll(/`(\w+)`/g)].map((m) => m[1]).sort(),
    });
  }
  return rows;
}

describe('lease errors over HTTP, WebSocket and RPC, class by class as docs/errors-and-http.md says', () => {
  const table = docsTable();
  const exported = Object.entries(api)
    .filter(([, value]) => typeof value === 'function' && value.prototype instanceof Error)
    .map(([name]) => name)
    .filter((name) => name !== 'LeaseError');

  it('lists every exported error class in the docs table and here', () => {
    expect([...table.keys()].sort()).toEqual([...exported].sort());
    expect(Object.keys(samples).sort()).toEqual([...exported].sort());
  });

  it.each(Object.entries(samples))('%s', (name, error) => {
    const row = table.get(name)!;
    const headers: Record<string, string> = {};
    const http = leaseErrorToHttp(error, { setHeader: (n: string, v: string) => (headers[n] = v) });
    expect(http).toBeInstanceOf(HttpException);
    expect((http as HttpException).getStatus()).toBe(row.status);
    expect((http as HttpException).cause).toBe(error);
    expect('Retry-After' in headers).toBe(row.retryAfter);
    // A joined run's failure answers what the original answered: Nest's answer to an error it does not know.
    if (name === 'LeaseJoinedRunError') {
      expect((http as HttpException).getResponse()).toEqual({ statusCode: 500, message: 'Internal server error' });
    } else expect((http as HttpException).getResponse()).toMatchObject({ code: name, message: clientMessage(error) });

    const body = leaseErrorBody(error);
    const base = ['status', 'code', 'message', 'targetKey'];
    expect(
      Object.keys(body)
        .filter((key) => !base.includes(key))
        .sort(),
    ).toEqual(row.wsFields);
    expect(body).toMatchObject({ status: 'error', code: name, message: clientMessage(error) });
  });

  /** What the client is told: the input's problem for a 400; else what happened, no option or setting named. */
  function clientMessage(error: LeaseError): string {
    const { message } = answerOf(error);
    if (error instanceof api.LeaseArgumentError) expect(message).toBe(error.message);
    else if (error instanceof api.LeaseJoinedRunError) expect(message).toBe('Internal server error');
    else
      expect(message).not.toMatch(/onBusy|acquire\(|timeoutMs|timing\.|priority|createSchema|migration|wait in line/);
    if (
      'retryAfterMs' in error ||
      error instanceof api.LeaseWaitTimeoutError ||
      error instanceof api.LeaseShutdownError
    ) {
      expect(message).toMatch(/Try again in \d+ s/);
    }
    return message;
  }

  it('tells the client when to retry in the seconds of Retry-After, and names the slots of a semaphore', () => {
    const headers: Record<string, string> = {};
    const http = leaseErrorToHttp(samples.LeaseBusyError, { setHeader: (n: string, v: string) => (headers[n] = v) });
    expect(headers['Retry-After']).toBe('3');
    expect((http as HttpException).getResponse()).toMatchObject({
      message: '"k" is busy: another request is working on it. Try again in 3 s',
      retryAfterSeconds: 3,
    });
    expect(answerOf(busyError('pool', 3, 1_200)).message).toBe('All 3 slots of "pool" are in use. Try again in 2 s');
    expect(answerOf(new api.LeaseConfigError('bad options: set timing.x')).message).toBe('Internal server error');
  });

  it('answers Retry-After in whole seconds, at least one', () => {
    const headers: Record<string, string> = {};
    leaseErrorToHttp(samples.LeaseBusyError, { header: (n: string, v: string) => (headers[n] = v) });
    expect(headers['Retry-After']).toBe('3');
    leaseErrorToHttp(new api.LeaseBusyError('k', 10), { setHeader: (n: string, v: string) => (headers[n] = v) });
    expect(headers['Retry-After']).toBe('1');
  });

  it("LeaseLostError's message claims only what fencing guarantees", () => {
    const { message } = samples.LeaseLostError;
    expect(message).toMatch(/fenced writes are refused/);
    expect(message).not.toMatch(/nothing was written|result was discarded/);
  });

  it("LeaseJoinedRunError of an HttpException: the original's status and body", () => {
    const body = { statusCode: 404, message: 'no report 7', error: 'Not Found' };
    const joined = new api.LeaseJoinedRunError('k', 7n, 'no report 7', { status: 404, response: body });
    const http = leaseErrorToHttp(joined) as HttpException;
    expect(http.getStatus()).toBe(404);
    expect(http.getResponse()).toEqual(body);
    expect(leaseErrorBody(joined)).toMatchObject({ code: 'LeaseJoinedRunError', fencingToken: '7' });
  });

  it('passes other errors through unchanged', () => {
    const other = new Error('not ours');
    expect(leaseErrorToHttp(other)).toBe(other);
  });
});
