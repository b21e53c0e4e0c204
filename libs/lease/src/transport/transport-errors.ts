/**
 * Lease errors for WebSocket gateways, microservices and GraphQL resolvers: the same facts as over HTTP, no HTTP
 * status.
 */
import { IntrinsicException } from '@nestjs/common';
import { LeaseError, LeaseWaitTimeoutError } from '../errors/lease.errors.js';
import { adviseOnce } from './answer-advice.js';
import { answerOf } from './lease-answers.js';
import { leaseErrorToHttp } from './lease-error-to-http.js';

/** What a WebSocket client or microservice caller receives for a lease error: the same facts, no HTTP status. */
export function leaseErrorBody(error: LeaseError): Record<string, unknown> {
  const answer = answerOf(error);
  adviseOnce(error, answer);
  const body: Record<string, unknown> = {
    status: 'error',
    code: error.name,
    message: answer.message,
    targetKey: error.targetKey,
  };
  if (answer.retryAfterMs !== undefined && !(error instanceof LeaseWaitTimeoutError)) {
    body.retryAfterMs = answer.retryAfterMs;
  }
  return Object.assign(body, answer.extra);
}

/** GraphQL error codes (Apollo's conventions, `extensions.code`) by the HTTP status of the same answer. */
const GRAPHQL_CODES: Record<number, string> = {
  400: 'BAD_USER_INPUT',
  409: 'CONFLICT',
  503: 'SERVICE_UNAVAILABLE',
};

/**
 * A lease error as a GraphQL resolver reports it. graphql-js copies the `extensions` of the error a resolver throws
 * into the GraphQL error of the response, so no import of `graphql` is needed: `extensions.code` (CONFLICT,
 * SERVICE_UNAVAILABLE, BAD_USER_INPUT, INTERNAL_SERVER_ERROR), `leaseError` (the class name), `targetKey`,
 * `retryAfterMs` where the answer has one, and what the answer adds (`reason`, `discarded`, `waitTimeoutMs`). An
 * `IntrinsicException`: Nest does not log it with a stack (an answer, like an HTTP 409, not a crash).
 */
class LeaseGraphQLError extends IntrinsicException {
  readonly extensions: Record<string, unknown>;

  constructor(error: LeaseError) {
    const answer = answerOf(error);
    super(answer.message, { cause: error });
    adviseOnce(error, answer);
    this.name = error.name;
    this.extensions = {
      code: GRAPHQL_CODES[answer.status] ?? 'INTERNAL_SERVER_ERROR',
      leaseError: error.name,
      targetKey: error.targetKey,
      ...(answer.retryAfterMs === undefined ? {} : { retryAfterMs: answer.retryAfterMs }),
      ...answer.extra,
    };
  }
}

/** `error` as a GraphQL error (see `LeaseGraphQLError`); other errors unchanged. */
export function leaseErrorToGraphQL(error: unknown): unknown {
  return error instanceof LeaseError ? new LeaseGraphQLError(error) : error;
}

type TransportErrors = { WsException?: new (error: object) => Error; RpcException?: new (error: object) => Error };
const transportErrors: Partial<Record<'ws' | 'rpc', Promise<TransportErrors>>> = {};

/**
 * Maps a lease error for the transport of the call: HTTP exceptions on HTTP; a `WsException` (an "exception" message
 * to the client) on WebSocket gateways; an `RpcException` (the error the caller receives) on microservices; a GraphQL
 * error with `extensions` (see `LeaseGraphQLError`) on resolvers. The
 * transport packages are imported only when such a call fails: an application with a gateway has them installed.
 * Other errors, and lease errors on other transports, pass through unchanged.
 */
export async function leaseErrorToTransport(error: unknown, type: string, response?: unknown): Promise<unknown> {
  if (type === 'http') return leaseErrorToHttp(error, response);
  if (type === 'graphql') return leaseErrorToGraphQL(error);
  if (!(error instanceof LeaseError) || (type !== 'ws' && type !== 'rpc')) return error;
  const load = () => (type === 'ws' ? import('@nestjs/websockets') : import('@nestjs/microservices'));
  const errors = await (transportErrors[type] ??= load().then(
    (module): TransportErrors => module as TransportErrors,
    (): TransportErrors => ({}),
  ));
  const Exception = type === 'ws' ? errors.WsException : errors.RpcException;
  return Exception ? new Exception(leaseErrorBody(error)) : error;
}
