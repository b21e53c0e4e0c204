/**
 * `run([k1, k2, …], work, options)`: several keys at once, all or none (docs/multi-key.md). Ordered acquisition: the
 * distinct keys are sorted in one global order (code-unit order of the strings) and taken one by one in that order,
 * each with the call's busy policy through the single-key door (`enter`): `'throw'` gives back what it took at the first
 * refusal; `'wait'` waits in each key's line in turn, holding the keys before it. Every caller takes its keys in the
 * same order, so no cycle of waits can form (a waiter holds only keys below the one it waits for, and the holder it
 * waits for never waits for a key below one it holds); each key's line is first come first served within a priority,
 * so a waiter is granted once the holders ahead of it finish. The cost: the keys taken first are held while the later
 * ones are waited for.
 */
import type { EntityManager } from 'typeorm';
import { LeaseArgumentError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { Lease } from '../interfaces/lease.interface.js';
import type { MultiLease, MultiRunOptions } from '../interfaces/multi-lease.interface.js';
import { type BusyPlan, type LeaseCall, runCall, waitBoundMs } from '../options/busy-policy.js';
import type { EngineSettings } from '../options/engine-settings.js';
import { withinTiming } from '../options/lease-timeout.js';
import { HeldLease } from './held-lease.js';
import type { LeaseEntry } from './service-engine.js';

import { MAX_MULTI_KEYS } from '../options/multi-keys.js';

/**
 * The order keys are taken in. Test-only defects (negative controls): `'as-given'` takes them in the order given (the
 * model test's), `'skip-last'` never takes the last one of the global order (the fault schedule's).
 */
export type MultiKeyOrder = 'sorted' | 'as-given' | 'skip-last';
let order: MultiKeyOrder = 'sorted';

/** Test-only (through `internal.ts`): take the keys in the order given, the deadlock the global order prevents. */
export function useMultiKeyOrder(next: MultiKeyOrder): void {
  order = next;
}

/** What a multi-key run needs of the engine. */
export interface MultiKeyHost {
  readonly options: EngineSettings;
  enter(call: LeaseCall): Promise<LeaseEntry>;
  within<T>(lease: Lease, work: () => T): T;
  readonly fencing: {
    fencedAll<T>(leases: readonly HeldLease[], work: (manager: EntityManager) => Promise<T>): Promise<T>;
  };
}

/** A value as given, for messages. */
function kindOf(value: unknown): string {
  return Array.isArray(value) ? 'an array' : value === null ? 'null' : typeof value;
}

/**
 * The calls of `run([…], work, options)`, checked before anything is written: one per key, in acquisition order, each
 * checked as a single-key `run` with the same options; the set's own rules (`LeaseArgumentError`): a non-empty array
 * of at most `MAX_MULTI_KEYS` distinct keys, one holder per key, `onBusy` `'throw'` or `'wait'`.
 */
export function multiKeyCalls(targetKeys: unknown, options: MultiRunOptions, settings: EngineSettings): LeaseCall[] {
  if (!Array.isArray(targetKeys)) throw new LeaseArgumentError(messages.multiKeysNotArray(kindOf(targetKeys)));
  if (targetKeys.length === 0) throw new LeaseArgumentError(messages.multiKeysEmpty());
  if (targetKeys.length > MAX_MULTI_KEYS) {
    throw new LeaseArgumentError(messages.multiKeysTooMany(MAX_MULTI_KEYS, targetKeys.length));
  }
  const given: unknown = typeof options === 'object' && options !== null ? options : {};
  const { limit, onBusy } = given as { limit?: unknown; onBusy?: unknown };
  if (limit !== undefined && limit !== 1)
    throw new LeaseArgumentError(messages.multiKeyOption(`limit ${JSON.stringify(limit) ?? typeof limit}`));
  const policy = typeof onBusy === 'object' && onBusy !== null ? Object.keys(onBusy)[0] : onBusy;
  if (policy === 'join' || policy === 'preempt') {
    throw new LeaseArgumentError(messages.multiKeyOption(`onBusy '${policy}'`));
  }
  return orderedCalls(targetKeys.map((targetKey) => withinTiming(runCall(targetKey, options), settings)));
}

/**
 * The calls of a set of keys in acquisition order: each key once (a `LeaseArgumentError` naming a key twice — a
 * decorator's templates may fill to the same key), sorted in the global order, the code-unit order of the key
 * strings (the default sort), the same in every process.
 */
export function orderedCalls(calls: LeaseCall[]): LeaseCall[] {
  const seen = new Set<string>();
  for (const { request } of calls) {
    if (seen.has(request.targetKey)) throw new LeaseArgumentError(messages.multiKeyDuplicate(request.targetKey));
    seen.add(request.targetKey);
  }
  if (order === 'as-given') return calls;
  calls.sort((a, b) => (a.request.targetKey < b.request.targetKey ? -1 : 1));
  return order === 'skip-last' && calls.length > 1 ? calls.slice(0, -1) : calls;
}

/**
 * Takes every key in the calls' order (see the file's comment), runs `work` with them all as the call chain's leases,
 * and releases them all when it settles. A refusal, a timeout, an abort, or the loss of a key taken meanwhile gives
 * back every key taken so far and rejects with that error.
 */
export async function runMultiKey<T>(
  host: MultiKeyHost,
  calls: readonly LeaseCall[],
  work: (lease: MultiLease) => Promise<T> | T,
): Promise<T> {
  const { busy, signal } = calls[0];
  // One bound for the whole call: each key waits for what is left of it.
  const until = busy.kind === 'wait' ? performance.now() + waitBoundMs(busy, host.options) : 0;
  const entries: LeaseEntry[] = [];
  try {
    for (const call of calls) {
      // A key taken earlier and lost meanwhile ends the wait for the next (its LeaseLostError is the rejection).
      const signals = [...(signal ? [signal] : []), ...entries.map((entry) => entry.lease.signal)];
      const keyBusy: BusyPlan =
        busy.kind === 'wait' ? { kind: 'wait', timeoutMs: Math.max(0, Math.ceil(until - performance.now())) } : busy;
      entries.push(
        await host.enter({
          ...call,
          busy: keyBusy,
          ...(signals.length === 0 ? {} : { signal: signals.length === 1 ? signals[0] : AbortSignal.any(signals) }),
        }),
      );
    }
  } catch (error) {
    await Promise.all(entries.map((entry) => entry.exit()));
    throw error;
  }
  const leases = entries.map((entry) => entry.lease);
  const multi = new KeySetLease(leases, host);
  // Every lease is a lease of the call chain: a nested `run` of one of the keys borrows it.
  const inChain = leases.reduceRight<() => Promise<T> | T>(
    (inner, lease) => () => host.within(lease, inner),
    () => work(multi),
  );
  try {
    return await inChain();
  } finally {
    await Promise.all(entries.map((entry) => entry.exit()));
  }
}

/** The `MultiLease` of a multi-key run. */
class KeySetLease implements MultiLease {
  readonly targetKeys: readonly string[];
  readonly fencingTokens: ReadonlyMap<string, bigint>;
  private anyEnded?: AbortSignal;

  constructor(
    readonly leases: readonly Lease[],
    private readonly host: MultiKeyHost,
  ) {
    this.targetKeys = Object.freeze(leases.map((lease) => lease.targetKey));
    this.fencingTokens = new Map(leases.map((lease) => [lease.targetKey, lease.fencingToken]));
  }

  get signal(): AbortSignal {
    this.anyEnded ??= AbortSignal.any(this.leases.map((lease) => lease.signal));
    return this.anyEnded;
  }

  isHeld(): boolean {
    return this.leases.every((lease) => lease.isHeld());
  }

  lease(targetKey: string): Lease | undefined {
    return this.leases.find((lease) => lease.targetKey === targetKey);
  }

  fenced<T>(work: (manager: EntityManager) => Promise<T>, ...rest: unknown[]): Promise<T> {
    if (rest.length > 0 && rest[0] !== undefined) {
      return Promise.reject(new LeaseArgumentError(messages.multiFenceOptions()));
    }
    const borrowed = this.leases.find((lease) => !(lease instanceof HeldLease));
    if (borrowed) {
      return Promise.reject(
        new LeaseArgumentError(messages.multiFenceBorrowed(borrowed.targetKey), borrowed.targetKey),
      );
    }
    return this.host.fencing.fencedAll(this.leases as readonly HeldLease[], work);
  }
}
