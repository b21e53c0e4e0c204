/**
 * The one channel from `ExclusiveInterceptor` to the method's wrapper (`callExclusive`), named: an AsyncLocalStorage
 * of the handler call in progress, and the wrapper's claim on it.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * One handler call that entered through `ExclusiveInterceptor`. The interceptor cannot acquire (it runs before the
 * pipes, and the key must come from the piped arguments), so it leaves this for the method's wrapper: the signal
 * aborts when the caller goes away (timeout interceptor, SSE or WebSocket client gone, cancelled RPC).
 */
export interface HandlerCall {
  readonly handler: Function;
  readonly signal: AbortSignal;
  claimed: boolean;
}

/** The handler call in progress, set by the interceptor around `next.handle()`. */
export const handlerCalls = new AsyncLocalStorage<HandlerCall>();

/** The interceptor's call, if it is this method's own (not a decorated method the handler calls in turn). */
export function claim(wrapped: Function): HandlerCall | undefined {
  const call = handlerCalls.getStore();
  if (!call || call.handler !== wrapped || call.claimed) return undefined;
  call.claimed = true;
  return call;
}
