/**
 * The wrapper of a decorated method, and what it runs per call (`callExclusive`); the one channel from
 * `ExclusiveInterceptor` to it — an AsyncLocalStorage of the handler call in progress, claimed by the wrapper of the
 * handler it names.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { isObservable, Observable } from 'rxjs';
import { LeaseArgumentError, LeaseBusyError, LeaseLostError, LeaseShutdownError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { Lease } from '../interfaces/lease.interface.js';
import type { ExclusiveMetadata } from '../options/busy-policy.js';
import { withinTiming } from '../options/lease-timeout.js';
import { type CallPlan, MethodPlans } from './call-plan.js';
import { ENGINE_PROPERTY, EngineRef, engines } from './engine-registry.js';
import { refusedAsNotOwner, stickyEntry } from './sticky-entry.js';
import { HeldLease } from '../engine/held-lease.js';
import { callMultiExclusive } from './multi-exclusive-call.js';
import type { LeaseEntry, ServiceEngine } from '../engine/service-engine.js';

type EngineHolder = { [ENGINE_PROPERTY]?: unknown };

/**
 * One handler call that entered through `ExclusiveInterceptor`. The interceptor cannot acquire (it runs before the
 * pipes, and the key must come from the piped arguments), so it leaves this for the method's wrapper: `leave` when
 * the caller goes away (timeout interceptor, SSE or WebSocket client gone, cancelled RPC). Its signal is made on first
 * read (a wait in line reads it): a call that never waits costs no AbortController and no listener.
 */
export class HandlerCall {
  claimed = false;
  /**
   * Set by the wrapper when the call's own work has settled (and its lease was given back): an error arriving at the
   * interceptor after that is the call's own; one arriving before it was raised inside (an interceptor listed above
   * `@Exclusive`, such as a timeout) while the work still runs.
   */
  settled?: boolean;
  /** The wrapper's one listener while the handler's work runs (see `settleHandler`): told when the caller left. */
  onGone?: () => void;
  private controller?: AbortController;
  private leftWith?: { reason: unknown };

  constructor(readonly handler: Function) {}

  /** Aborts when the caller goes away. */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.leftWith) this.controller.abort(this.leftWith.reason);
    }
    return this.controller.signal;
  }

  /** Whether the caller went away. */
  get gone(): boolean {
    return this.leftWith !== undefined;
  }

  /** Why the caller went away (meaningful once `gone`). */
  get reason(): unknown {
    return this.leftWith?.reason;
  }

  /** The caller went away: the signal aborts (if read) and the wrapper's listener hears it. */
  leave(reason: unknown): void {
    if (this.leftWith) return;
    this.leftWith = { reason };
    this.controller?.abort(reason);
    this.onGone?.();
  }
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

/** A decorated method, as its wrapper knows it (built once, at decoration). */
export interface DecoratedMethod {
  /** What replaces the method: runs `callExclusive` with the call's `this` and arguments. */
  readonly wrapped: Function;
  readonly original: Function;
  readonly declaringClass: Function;
  /** Its static call plans (see call-plan.ts), held by the wrapper; the explorer builds them at bootstrap. */
  readonly plans: MethodPlans;
}

/** The wrapper of a decorated method (decorated-method.ts puts it in place). */
export function wrapMethod(
  original: Function,
  declaringClass: Function,
  methodName: string | symbol,
  metadata: ExclusiveMetadata,
): DecoratedMethod {
  const method: DecoratedMethod = {
    wrapped: function (this: unknown, ...args: unknown[]): Promise<unknown> {
      return callExclusive(this, method, args);
    },
    original,
    declaringClass,
    plans: new MethodPlans(metadata, methodName, () => method.wrapped),
  };
  return method;
}

const isThenable = (value: unknown): value is PromiseLike<unknown> =>
  value !== null &&
  (typeof value === 'object' || typeof value === 'function') &&
  typeof (value as PromiseLike<unknown>).then === 'function';

/**
 * What every `@Exclusive` method runs when called, whoever calls it: find the application's LeaseService, compute the
 * key from the arguments, acquire (or wait, or skip), run the original in the lease's call context, release when it
 * settles. A handler call (from the interceptor) also ends at once when its lease is lost or its caller goes away.
 */
async function callExclusive(self: unknown, method: DecoratedMethod, args: unknown[]): Promise<unknown> {
  const call = claim(method.wrapped);
  const plan = method.plans.of(self !== null && typeof self === 'object' ? self.constructor : method.declaringClass);
  // The application's entry its injector set on the instance (nearly every call); else the registry finds it.
  const own = self !== null && typeof self === 'object' ? (self as EngineHolder)[ENGINE_PROPERTY] : undefined;
  const application = own instanceof EngineRef ? own : engines.entryFor(self, plan.label);
  const leases = application.engine;
  const { metadata, keyTemplate } = plan;
  if (plan.keysOf) {
    return callMultiExclusive(self, method.original, plan, args, leases, call?.signal).finally(
      () => call && (call.settled = true),
    );
  }
  const targetKey = plan.keyOf(args);
  const { original } = method;
  let entry: LeaseEntry;
  try {
    if (metadata.sticky) {
      entry = await stickyEntry(leases, application.candidates, targetKey, metadata, keyTemplate, call?.signal);
    } else {
      // A lease length of the declaration's own is checked against the application's timing at bootstrap by the
      // explorer; a method no explorer saw is checked here, before anything is written. None: the module's.
      // One attempt needs no signal (it is not given up on): whether the caller left is checked around it.
      const oneAttempt = metadata.busy.kind === 'throw' || metadata.busy.kind === 'skip';
      if (oneAttempt && call?.gone) throw call.reason;
      const planned = plan.call(targetKey, oneAttempt ? undefined : call?.signal);
      const leaseCall = metadata.leaseTimeoutMs === undefined ? planned : withinTiming(planned, leases.options);
      if (metadata.busy.kind === 'join') {
        return await leases
          .joinRun(leaseCall, (lease) => joinedWork(self, original, plan, args, lease))
          .finally(() => call && (call.settled = true));
      }
      entry = await leases.enter(leaseCall);
    }
  } catch (error) {
    // Quiet: a skipped call is the expected outcome of every tick a peer holds the key; events$ emits `busy` (the
    // prometheus integration counts it). A sticky call waiting its turn is skipped on an instance that is not the
    // owner (see sticky-entry.ts).
    if (error instanceof LeaseBusyError && skips(metadata, error)) return undefined;
    throw error;
  }
  // A lease that arrived after the caller left (a statement that committed late) is not kept.
  if (call?.gone) {
    await entry.exit();
    throw call.reason;
  }
  // The arguments are copied only where `@CurrentLease()` puts the lease in them.
  let callArgs = args;
  if (plan.leaseSlots.length > 0) {
    callArgs = [...args];
    for (const index of plan.leaseSlots) callArgs[index] = entry.lease;
  }
  let result: unknown;
  try {
    result = leases.within(entry.lease, () => original.apply(self, callArgs));
  } catch (error) {
    await entry.exit();
    throw error;
  }
  if (isObservable(result)) return holdWhileSubscribed(result, entry, leases, call);
  if (!isThenable(result)) {
    if (call) call.settled = true;
    await entry.exit();
    return result;
  }
  if (!call) {
    try {
      return await result;
    } finally {
      await entry.exit();
    }
  }
  return settleHandler(result, entry, call);
}

/** Whether a refusal skips the call: `'skip'`; for `@Sticky` with `'wait'`, a refusal because another owns the key. */
function skips(metadata: ExclusiveMetadata, error: LeaseBusyError): boolean {
  return (
    metadata.busy.kind === 'skip' || (metadata.sticky && metadata.busy.kind === 'wait' && refusedAsNotOwner(error))
  );
}

/** The method's work under a joinable run: a value (a promise's), never an Observable (not JSON). */
async function joinedWork(self: unknown, original: Function, plan: CallPlan, args: unknown[], lease: Lease) {
  const callArgs = [...args];
  for (const index of plan.leaseSlots) callArgs[index] = lease;
  const result: unknown = await original.apply(self, callArgs);
  if (isObservable(result)) throw new LeaseArgumentError(messages.joinObservable(plan.label));
  return result;
}

/**
 * A handler call settles with its work, or at once when the lease is lost (the client hears "discarded" without
 * waiting for the work to notice), when shutdown releases it (`LeaseShutdownError`: 503) or the caller goes away (the lease is released; the work sees its signal abort).
 * Released before the answer goes out, so a client that got its answer can start the next run at once.
 */
function settleHandler(work: PromiseLike<unknown>, entry: LeaseEntry, call: HandlerCall): Promise<unknown> {
  const { lease } = entry;
  return new Promise<unknown>((resolve, reject) => {
    let settled = false;
    const settle = (finish: () => void) => {
      if (settled) return;
      settled = true;
      call.settled = true;
      stopWatching();
      call.onGone = undefined;
      void entry.exit().finally(finish);
    };
    const onLost = (reason: unknown) => {
      if (reason instanceof LeaseLostError || reason instanceof LeaseShutdownError) settle(() => reject(reason));
    };
    const stopWatching = watchLoss(lease, onLost);
    call.onGone = () => settle(() => reject(call.reason));
    if (call.gone) call.onGone();
    work.then(
      (value) => settle(() => resolve(value)),
      (error: unknown) => settle(() => reject(error)),
    );
  });
}

/**
 * Calls `onLoss` with the reason the lease is lost (or ended by shutdown) until the returned function is called. A
 * lease of the engine's own is watched without its signal (no AbortController, no listener, no abort reason built
 * for a lease released the ordinary way); a borrowed one, through its signal.
 */
function watchLoss(lease: Lease, onLoss: (reason: unknown) => void): () => void {
  if (lease instanceof HeldLease) return lease.watchLoss(onLoss);
  const { signal } = lease;
  const listener = () => onLoss(signal.reason);
  signal.addEventListener('abort', listener);
  if (signal.aborted) listener();
  return () => signal.removeEventListener('abort', listener);
}

/**
 * A method that returns an Observable holds its lease while the Observable runs: released when it completes, errors
 * or is unsubscribed; ended with `LeaseLostError` when the lease is lost. The subscriber's work runs in the lease's
 * call context. A handler whose caller left before subscribing releases at once.
 */
function holdWhileSubscribed(
  source: Observable<unknown>,
  entry: LeaseEntry,
  leases: ServiceEngine,
  call?: HandlerCall,
): Observable<unknown> {
  const { lease } = entry;
  let subscribed = false;
  const onGoneEarly = () => {
    if (!subscribed) void entry.exit();
  };
  call?.signal.addEventListener('abort', onGoneEarly, { once: true });
  return new Observable<unknown>((subscriber) => {
    subscribed = true;
    call?.signal.removeEventListener('abort', onGoneEarly);
    let finished = false;
    const finish = (end: () => void) => {
      if (finished) return;
      finished = true;
      if (call) call.settled = true;
      lease.signal.removeEventListener('abort', onLost);
      void entry.exit().finally(end);
    };
    const onLost = () => {
      if (!(lease.signal.reason instanceof LeaseLostError)) return;
      inner.unsubscribe();
      finish(() => subscriber.error(lease.signal.reason));
    };
    const inner = leases.within(lease, () =>
      source.subscribe({
        next: (value) => subscriber.next(value),
        error: (error: unknown) => finish(() => subscriber.error(error)),
        complete: () => finish(() => subscriber.complete()),
      }),
    );
    if (!finished) lease.signal.addEventListener('abort', onLost);
    if (lease.signal.aborted) onLost();
    return () => {
      inner.unsubscribe();
      finish(() => undefined);
    };
  });
}
