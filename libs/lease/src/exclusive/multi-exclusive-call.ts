/**
 * A call of a method decorated with several key templates (`@Exclusive([t1, t2, …])`, docs/multi-key.md): its keys,
 * one per template from the call's arguments, taken all or none in the global order (engine/multi-key-run.ts), the
 * method run with the call's `MultiLease` (where `@CurrentLease()` asks) and every lease in its call chain, every key
 * released when it settles. `'skip'`: a busy key resolves the call `undefined`. A handler call's caller going away
 * ends its wait; once the method runs, it runs to its end (its `MultiLease.signal` aborts when a lease is lost).
 */
import { isObservable } from 'rxjs';
import { LeaseArgumentError, LeaseBusyError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import { orderedCalls, runMultiKey } from '../engine/multi-key-run.js';
import type { ServiceEngine } from '../engine/service-engine.js';
import { withinTiming } from '../options/lease-timeout.js';
import type { CallPlan } from './call-plan.js';

export async function callMultiExclusive(
  self: unknown,
  original: Function,
  plan: CallPlan,
  args: unknown[],
  engine: ServiceEngine,
  signal: AbortSignal | undefined,
): Promise<unknown> {
  const { metadata } = plan;
  const keys = plan.keysOf!(args);
  const calls = orderedCalls(
    keys.map((key) => {
      const planned = plan.call(key, signal);
      return metadata.leaseTimeoutMs === undefined ? planned : withinTiming(planned, engine.options);
    }),
  );
  try {
    return await runMultiKey(engine, calls, async (lease) => {
      const callArgs = [...args];
      for (const index of plan.leaseSlots) callArgs[index] = lease;
      const result: unknown = await original.apply(self, callArgs);
      if (isObservable(result)) throw new LeaseArgumentError(messages.multiKeyObservable(plan.label));
      return result;
    });
  } catch (error) {
    if (error instanceof LeaseBusyError && metadata.busy.kind === 'skip') return undefined;
    throw error;
  }
}
