import { type CallHandler, type ExecutionContext, Inject, Injectable, type NestInterceptor } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { catchError, defer, Observable } from 'rxjs';
import { handlerCalls, type HandlerCall } from './exclusive-call.js';
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
  // Explicit token: toolchains without decorator metadata (esbuild, tsx, vitest) could not inject by type.
  constructor(@Inject(Reflector) private readonly reflector: Reflector) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const metadata = this.reflector.get<ExclusiveMetadata | undefined>(EXCLUSIVE_METADATA, context.getHandler());
    if (!metadata) return next.handle();
    const type = context.getType<string>();
    const response = type === 'http' ? context.switchToHttp().getResponse<unknown>() : undefined;
    return new Observable<unknown>((subscriber) => {
      const caller = new AbortController();
      const call: HandlerCall = { handler: context.getHandler(), signal: caller.signal, claimed: false };
      let ended = false;
      // next.handle() binds the handler to the async context it is called in: the call's.
      const inner = handlerCalls
        .run(call, () => next.handle())
        .pipe(
          catchError((error: unknown) =>
            defer(async () => Promise.reject(await leaseErrorToTransport(error, type, response))),
          ),
        )
        .subscribe({
          next: (value) => subscriber.next(value),
          error: (error: unknown) => {
            // An error before the call's work settled was raised inside this interceptor (one listed above
            // @Exclusive, such as a timeout): the caller hears it now, so the call is over — released below.
            ended = call.settled === true;
            subscriber.error(error);
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
          caller.abort(new DOMException('The caller went away before the @Exclusive call settled', 'AbortError'));
        inner.unsubscribe();
      };
    });
  }
}
