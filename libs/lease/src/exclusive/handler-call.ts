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
  /**
   * Set by the wrapper when the call's own work has settled (and its lease was given back): an error arriving at the
   * interceptor after that is the call's own; one arriving before it was raised inside (an interceptor listed above
   * `@Exclusive`, such as a timeout) while the work still runs.
   */
  settled?: boolean;
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
