import { type CallHandler, type ExecutionContext, Inject, Injectable, type NestInterceptor } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { Observable } from 'rxjs';
import { HandlerCall, handlerCalls } from './exclusive-call.js';
import type { ExclusiveMetadata } from '../options/busy-policy.js';
import { EXCLUSIVE_METADATA } from '../lease.internal-constants.js';
import { leaseErrorToTransport } from '../transport/transport-errors.js';

/**
 * The handler door of `@Exclusive` (HTTP, WebSocket, microservice, GraphQL). It does not acquire: interceptors run before
 * the pipes, and the key comes from the piped arguments, so the method's own wrapper acquires (exactly once per
 * call). This interceptor gives that call a signal that aborts when the caller goes away — a timeout interceptor
 * (listed above or below `@Exclusive`, or global), an SSE or WebSocket client that disconnects, a cancelled RPC — so a wait in line ends, its waiter row
 * is removed and a lease arriving late is released; and it maps lease errors for the transport (HTTP statuses only
 * on HTTP).
 */
@Injectable()
export class ExclusiveInterceptor implements NestInterceptor {
  /** Each handler's `@Exclusive` metadata (null: none), read once: the reflection is not paid per request. */
  private readonly handlers = new WeakMap<Function, ExclusiveMetadata | null>();

  // Explicit token: toolchains without decorator metadata (esbuild, tsx, vitest) could not inject by type.
  constructor(@Inject(Reflector) private readonly reflector: Reflector) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const handler = context.getHandler();
    let metadata = this.handlers.get(handler);
    if (metadata === undefined) {
      metadata = this.reflector.get<ExclusiveMetadata | undefined>(EXCLUSIVE_METADATA, handler) ?? null;
      this.handlers.set(handler, metadata);
    }
    if (!metadata) return next.handle();
    const type = context.getType<string>();
    // One Observable and one subscription of the handler's per request: no operator pipeline.
    return new Observable<unknown>((subscriber) => {
      const call = new HandlerCall(handler);
      let ended = false;
      // next.handle() binds the handler to the async context it is called in: the call's.
      const inner = handlerCalls
        .run(call, () => next.handle())
        .subscribe({
          next: (value) => subscriber.next(value),
          error: (error: unknown) => {
            // An error before the call's work settled was raised inside this interceptor (one listed above
            // @Exclusive, such as a timeout): the caller hears it now, so the call is over — released below.
            const fail = (mapped: unknown) => {
              ended = call.settled === true;
              subscriber.error(mapped);
            };
            // The response is looked up only here: an HTTP error may set a header on it (Retry-After).
            const response = type === 'http' ? context.switchToHttp().getResponse<unknown>() : undefined;
            leaseErrorToTransport(error, type, response).then(fail, fail);
          },
          complete: () => {
            ended = true;
            subscriber.complete();
          },
        });
      // The caller unsubscribed (an outer or global timeout interceptor, a client gone) or an inner interceptor ended
      // the call: its wait ends, a lease arriving late is released, a lease held is released (its signal aborts).
      return () => {
        if (!ended)
          call.leave(new DOMException('The caller went away before the @Exclusive call settled', 'AbortError'));
        inner.unsubscribe();
      };
    });
  }
}
