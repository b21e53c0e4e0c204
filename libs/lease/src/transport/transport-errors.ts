/** Lease errors for WebSocket gateways and microservices: the same facts as over HTTP, no HTTP status. */
import { LeaseError, LeaseWaitTimeoutError } from '../errors/lease.errors.js';
import { answerOf } from './lease-answers.js';
import { leaseErrorToHttp } from './lease-error-to-http.js';

/** What a WebSocket client or microservice caller receives for a lease error: the same facts, no HTTP status. */
export function leaseErrorBody(error: LeaseError): Record<string, unknown> {
  const answer = answerOf(error);
  const body: Record<string, unknown> = {
    status: 'error',
    code: error.name,
    message: error.message,
    targetKey: error.targetKey,
  };
  if (answer.retryAfterMs !== undefined && !(error instanceof LeaseWaitTimeoutError)) {
    body.retryAfterMs = answer.retryAfterMs;
  }
  return Object.assign(body, answer.extra);
}

type TransportErrors = { WsException?: new (error: object) => Error; RpcException?: new (error: object) => Error };
const transportErrors: Partial<Record<'ws' | 'rpc', Promise<TransportErrors>>> = {};

/**
 * Maps a lease error for the transport of the call: HTTP exceptions on HTTP; a `WsException` (an "exception" message
 * to the client) on WebSocket gateways; an `RpcException` (the error the caller receives) on microservices. The
 * transport packages are imported only when such a call fails: an application with a gateway has them installed.
 * Other errors, and lease errors on other transports, pass through unchanged.
 */
export async function leaseErrorToTransport(error: unknown, type: string, response?: unknown): Promise<unknown> {
  if (type === 'http') return leaseErrorToHttp(error, response);
  if (!(error instanceof LeaseError) || (type !== 'ws' && type !== 'rpc')) return error;
  const load = () => (type === 'ws' ? import('@nestjs/websockets') : import('@nestjs/microservices'));
  const errors = await (transportErrors[type] ??= load().then(
    (module): TransportErrors => module as TransportErrors,
    (): TransportErrors => ({}),
  ));
  const Exception = type === 'ws' ? errors.WsException : errors.RpcException;
  return Exception ? new Exception(leaseErrorBody(error)) : error;
}
