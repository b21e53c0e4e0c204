/**
 * The one translation of a call's options into what the engine does: which options each door takes (an unknown one
 * is refused naming the nearest valid one, or the new spelling of a removed one), the busy policy checked and turned
 * into a `BusyPlan`, and the request. Per call (`LeaseService`'s methods) the errors are `LeaseArgumentError`s; at
 * decoration (`@Exclusive`, `@Sticky`) `LeaseConfigError`s, with the same messages named after the decorator.
 */
import { LeaseArgumentError, LeaseConfigError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { AcquireOptions, RunOptions, TryAcquireOptions } from '../interfaces/acquire-options.interface.js';
import type { ExclusiveKey, ExclusiveOptions, StickyOptions } from '../interfaces/exclusive-options.interface.js';
import { type CallRule, callRequest, type LeaseRequest, limitOf, RULES } from './call-input.js';
import type { EngineSettings } from './engine-settings.js';
import { nearestName } from './nearest-name.js';
import type { RetryAfter } from '../interfaces/refusable-call.interface.js';

/** What a busy key does, as the engine runs it. An undefined bound is the module's default. */
export type BusyPlan =
  | { readonly kind: 'throw' }
  | { readonly kind: 'skip' }
  | { readonly kind: 'wait'; readonly timeoutMs?: number }
  | { readonly kind: 'join'; readonly timeoutMs?: number }
  | { readonly kind: 'preempt'; readonly graceMs?: number; readonly waitTimeoutMs?: number };

type PolicyName = BusyPlan['kind'];

/**
 * One call as the engine takes it: the request, what a busy key does, the caller's signal, and what a refusal tells
 * the client (`retryAfterMs`; the engine's estimate when absent).
 */
export interface LeaseCall<Plan extends BusyPlan = BusyPlan> {
  readonly request: LeaseRequest;
  readonly busy: Plan;
  readonly signal?: AbortSignal;
  readonly retryAfter?: RetryAfter;
}

/** A call that waits in line: `acquire`, and `run` / `@Exclusive` with `'wait'` or `'preempt'`. */
export type WaitingPlan = Extract<BusyPlan, { kind: 'wait' | 'preempt' }>;

/** An `@Exclusive` / `@Sticky` declaration, checked once at decoration: all of a call but its key (filled per call). */
export interface ExclusiveMetadata {
  readonly targetKey: ExclusiveKey;
  /** `@Exclusive([t1, t2, …])`: every key template (the first is `targetKey`), taken all or none (options/multi-keys.ts). */
  readonly targetKeys?: readonly string[];
  readonly priority: number;
  readonly holdMs: number;
  readonly limit: number;
  /** The declaration's own lease length (`ExclusiveOptions.leaseTimeoutMs`); absent: the module's. */
  readonly leaseTimeoutMs?: number;
  readonly busy: BusyPlan;
  /** `@Sticky`: the owner instance keeps the lease across calls (see exclusive/sticky-entry.ts). */
  readonly sticky: boolean;
  /** `retryAfterMs`, when declared. */
  readonly retryAfter?: RetryAfter;
}

/** The doors, as messages name them. */
type Door = 'tryAcquire()' | 'acquire()' | 'run()' | '@Exclusive' | '@Sticky' | 'elect()' | '@LeaderElection';

/** The fields of each policy's object form. */
const POLICY_FIELDS = { wait: ['timeoutMs'], join: ['timeoutMs'], preempt: ['graceMs', 'waitTimeoutMs'] } as const;

/** What each door takes: its options, its busy policies (the first is its default). */
const DOORS: Record<Door, { readonly keys: readonly string[]; readonly policies: readonly PolicyName[] }> = {
  'tryAcquire()': {
    keys: ['priority', 'holdAtLeastMs', 'keyTemplate', 'limit', 'mode', 'leaseTimeoutMs'],
    policies: [],
  },
  'acquire()': {
    keys: ['priority', 'holdAtLeastMs', 'keyTemplate', 'limit', 'mode', 'leaseTimeoutMs', 'onBusy', 'signal'],
    policies: ['wait', 'preempt'],
  },
  'run()': {
    keys: [
      ...['priority', 'holdAtLeastMs', 'keyTemplate', 'limit', 'mode', 'leaseTimeoutMs'],
      ...['onBusy', 'signal', 'retryAfterMs'],
    ],
    policies: ['throw', 'wait', 'join', 'preempt'],
  },
  '@Exclusive': {
    keys: ['priority', 'holdAtLeastMs', 'limit', 'mode', 'leaseTimeoutMs', 'onBusy', 'retryAfterMs'],
    policies: ['throw', 'skip', 'wait', 'join', 'preempt'],
  },
  '@Sticky': { keys: ['priority', 'onBusy'], policies: ['throw', 'skip', 'wait'] },
  'elect()': { keys: ['priority', 'keyTemplate', 'signal', 'onElected', 'onRevoked'], policies: [] },
  '@LeaderElection': { keys: ['priority', 'keyTemplate'], policies: [] },
};

/** The new spelling of an option of the flag era (issue 39), for the advice of its refusal. */
const RENAMED: Readonly<Record<string, string>> = {
  waitTimeoutMs: 'onBusy: { wait: { timeoutMs } }',
  preempt: "onBusy: 'preempt'",
  preemptGraceMs: 'onBusy: { preempt: { graceMs } }',
  joinTimeoutMs: 'onBusy: { join: { timeoutMs } }',
  sticky: '@Sticky(key, options) instead of @Exclusive',
};

/** How a door refuses: a `LeaseArgumentError` per call, a `LeaseConfigError` naming the decorator at decoration. */
type Refuse = (message: string) => never;
const perCall: Refuse = (message) => {
  throw new LeaseArgumentError(message);
};
const declared =
  (decorator: '@Exclusive' | '@Sticky'): Refuse =>
  (message) => {
    // A message that names its door already (an unknown option, an onBusy it does not take) is not prefixed again.
    throw new LeaseConfigError(message.startsWith(decorator) ? message : messages.declared(decorator, message));
  };

/** The advice for an option a door does not take: a removed option's new spelling, else the nearest name. */
function hintFor(door: Door, key: string): string {
  const { keys, policies } = DOORS[door];
  if (door === 'tryAcquire()' && (key === 'onBusy' || Object.hasOwn(RENAMED, key))) {
    return 'tryAcquire() attempts once and never waits: use acquire() or run() with an onBusy policy';
  }
  if (door === '@Sticky' && ['holdAtLeastMs', 'limit', 'sticky', 'leaseTimeoutMs'].includes(key)) {
    return 'a sticky owner keeps its one lease across calls: the options are priority, onBusy';
  }
  if (Object.hasOwn(RENAMED, key) && policies.length > 0 && key !== 'sticky') return `did you mean ${RENAMED[key]}?`;
  if (key === 'sticky' && door === '@Exclusive') return `did you mean ${RENAMED.sticky}?`;
  const nearest = nearestName(key, keys);
  return nearest === undefined ? `the options are ${keys.join(', ')}` : `did you mean "${nearest}"?`;
}

/** Options must be an object whose every key the door takes. */
function checkKeys(door: Door, options: object, refuse: Refuse): void {
  if (typeof options !== 'object' || options === null) refuse(messages.callOptionsNotObject(door, typeof options));
  const { keys } = DOORS[door];
  for (const key of Object.keys(options)) {
    if (!keys.includes(key)) refuse(messages.unknownCallOption(door, key, hintFor(door, key)));
  }
}

/** A value of a call checked by its rule (see `RULES`). */
function checkRule(rule: CallRule, value: unknown, path: string, refuse: Refuse): void {
  const message = RULES[rule](value, path);
  if (message !== undefined) refuse(message);
}

const THROW: BusyPlan = Object.freeze({ kind: 'throw' });
const WAIT: BusyPlan = Object.freeze({ kind: 'wait' });

/** The forms a door takes, for its messages: `'throw', 'wait', { wait: … }`. */
function formsOf(policies: readonly PolicyName[]): string {
  return policies
    .map((name) => (Object.hasOwn(POLICY_FIELDS, name) ? `'${name}', { ${name}: … }` : `'${name}'`))
    .join(', ');
}

/** A door's busy policy checked (its form, its fields, the limit) and turned into the engine's plan. */
function busyPlanOf(door: Door, onBusy: unknown, limit: number, refuse: Refuse): BusyPlan {
  const { policies } = DOORS[door];
  if (onBusy === undefined) return policies[0] === 'wait' ? WAIT : THROW;
  const got = describePolicy(onBusy);
  let plan: BusyPlan | undefined;
  if (typeof onBusy === 'string') {
    if ((policies as readonly string[]).includes(onBusy)) plan = { kind: onBusy as PolicyName };
  } else if (typeof onBusy === 'object' && onBusy !== null && !Array.isArray(onBusy)) {
    const names = Object.keys(onBusy);
    const [name] = names;
    if (names.length === 1 && Object.hasOwn(POLICY_FIELDS, name) && (policies as readonly string[]).includes(name)) {
      plan = policyObject(name as keyof typeof POLICY_FIELDS, (onBusy as Record<string, unknown>)[name], refuse);
    }
  }
  if (!plan) return refuse(messages.onBusyInvalid(door, formsOf(policies), got));
  // A semaphore's key has several holders: no one run to join, no one holder to preempt. So has a read-write key.
  if (limit !== 1 && (plan.kind === 'join' || plan.kind === 'preempt')) {
    const option = `onBusy '${plan.kind}'`;
    refuse(limit > 1 ? messages.limitWithSingleHolderOption(option) : messages.modeWith(option));
  }
  return plan;
}

/** `{ wait: { timeoutMs } }`, `{ join: { timeoutMs } }`, `{ preempt: { graceMs, waitTimeoutMs } }`, checked. */
function policyObject(name: keyof typeof POLICY_FIELDS, fields: unknown, refuse: Refuse): BusyPlan {
  if (typeof fields !== 'object' || fields === null || Array.isArray(fields)) {
    return refuse(messages.policyNotObject(name, POLICY_FIELDS[name].join(', '), describePolicy(fields)));
  }
  const valid: readonly string[] = POLICY_FIELDS[name];
  const values = fields as Record<string, unknown>;
  for (const [field, value] of Object.entries(values)) {
    if (!valid.includes(field)) {
      const nearest = nearestName(field, valid);
      const hint = nearest === undefined ? `the fields are ${valid.join(', ')}` : `did you mean "${nearest}"?`;
      refuse(messages.unknownPolicyField(name, field, hint));
    }
    if (value !== undefined) checkRule('duration', value, `onBusy.${name}.${field}`, refuse);
  }
  if (name === 'preempt') {
    return {
      kind: 'preempt',
      graceMs: values.graceMs as number | undefined,
      waitTimeoutMs: values.waitTimeoutMs as number | undefined,
    };
  }
  return { kind: name, timeoutMs: values.timeoutMs as number | undefined };
}

/** A policy as given, for messages. */
function describePolicy(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return typeof value;
  }
}

/** The priority, hold, limit and lease length of a door's options, checked by their rules. */
function checkValues(
  options: { priority?: unknown; holdAtLeastMs?: unknown; limit?: unknown; leaseTimeoutMs?: unknown },
  refuse: Refuse,
) {
  if (options.priority !== undefined) checkRule('priority', options.priority, 'priority', refuse);
  if (options.holdAtLeastMs !== undefined) checkRule('holdAtLeastMs', options.holdAtLeastMs, 'holdAtLeastMs', refuse);
  if (options.limit !== undefined) checkRule('limit', options.limit, 'limit', refuse);
  if (options.leaseTimeoutMs !== undefined) {
    checkRule('leaseTimeoutMs', options.leaseTimeoutMs, 'leaseTimeoutMs', refuse);
  }
}

/** `retryAfterMs`: a duration, or a function of the estimate (see `RefusableCallOptions`). */
function retryAfterOf(value: unknown, refuse: Refuse): RetryAfter | undefined {
  if (value === undefined || typeof value === 'function') return value as RetryAfter | undefined;
  checkRule('duration', value, 'retryAfterMs', refuse);
  return value as number;
}

/** `tryAcquire(targetKey, options)`: the request (one attempt, no policy). */
export function tryAcquireRequest(targetKey: unknown, options: TryAcquireOptions): LeaseRequest {
  checkKeys('tryAcquire()', options, perCall);
  return callRequest(targetKey, options);
}

/** `acquire(targetKey, options)`: a call that waits (`'wait'`, the default) or preempts. */
export function acquireCall(targetKey: unknown, options: AcquireOptions): LeaseCall<WaitingPlan> {
  return doorCall('acquire()', targetKey, options) as LeaseCall<WaitingPlan>;
}

/** `run(targetKey, work, options)`: throw (the default), wait, join or preempt. */
export function runCall(targetKey: unknown, options: RunOptions): LeaseCall {
  return doorCall('run()', targetKey, options);
}

function doorCall(door: 'acquire()' | 'run()', targetKey: unknown, options: RunOptions | AcquireOptions): LeaseCall {
  checkKeys(door, options, perCall);
  const request = callRequest(targetKey, options);
  const busy = busyPlanOf(door, options.onBusy, request.limit, perCall);
  const retryAfter = 'retryAfterMs' in options ? retryAfterOf(options.retryAfterMs, perCall) : undefined;
  return {
    request,
    busy,
    ...(options.signal === undefined ? {} : { signal: options.signal }),
    ...(retryAfter === undefined ? {} : { retryAfter }),
  };
}

/**
 * `@Exclusive(targetKey, priorityOrOptions)`, checked once at decoration. The shorthand `@Exclusive(key, 5)` waits in
 * line with priority 5; `@Exclusive(key)` and the options form without `onBusy` refuse a busy key.
 */
export function exclusiveDeclaration(
  targetKey: ExclusiveKey,
  priorityOrOptions?: number | ExclusiveOptions,
): ExclusiveMetadata {
  if (typeof targetKey !== 'function' && (typeof targetKey !== 'string' || targetKey.length === 0)) {
    throw new LeaseConfigError(messages.exclusiveKeyMissing());
  }
  const refuse = declared('@Exclusive');
  const options: ExclusiveOptions =
    typeof priorityOrOptions === 'number' ? { priority: priorityOrOptions, onBusy: 'wait' } : (priorityOrOptions ?? {});
  checkKeys('@Exclusive', options, refuse);
  checkValues(options, refuse);
  const limit = limitOf(options, refuse);
  const retryAfter = retryAfterOf(options.retryAfterMs, refuse);
  return Object.freeze({
    targetKey,
    priority: options.priority ?? 0,
    holdMs: ('holdAtLeastMs' in options ? options.holdAtLeastMs : undefined) ?? 0,
    limit,
    ...(options.leaseTimeoutMs === undefined ? {} : { leaseTimeoutMs: options.leaseTimeoutMs }),
    busy: busyPlanOf('@Exclusive', options.onBusy, limit, refuse),
    sticky: false,
    ...(retryAfter === undefined ? {} : { retryAfter }),
  });
}

/** `@Sticky(targetKey, options)`, checked once at decoration: a fixed key (no placeholders, no function). */
export function stickyDeclaration(targetKey: unknown, options: StickyOptions = {}): ExclusiveMetadata {
  if (typeof targetKey !== 'string' || targetKey.length === 0 || /\{[^}]*\}/.test(targetKey)) {
    throw new LeaseConfigError(messages.stickyNeedsFixedKey());
  }
  const refuse = declared('@Sticky');
  checkKeys('@Sticky', options, refuse);
  checkValues(options, refuse);
  const busy = busyPlanOf('@Sticky', options.onBusy, 1, refuse);
  return Object.freeze({ targetKey, priority: options.priority ?? 0, holdMs: 0, limit: 1, busy, sticky: true });
}

/** `elect()`'s and `@LeaderElection`'s options: only theirs (a `LeaseArgumentError` otherwise). */
export function checkElectionKeys(door: 'elect()' | '@LeaderElection', options: object): void {
  checkKeys(door, options, perCall);
}

/** How long a waiting call waits in line: its policy's bound, else the module's default. */
export function waitBoundMs(plan: WaitingPlan, settings: Pick<EngineSettings, 'defaultWaitTimeoutMs'>): number {
  return (plan.kind === 'wait' ? plan.timeoutMs : plan.waitTimeoutMs) ?? settings.defaultWaitTimeoutMs;
}

/** A preempting call's grace (its policy's, else the module's), or undefined for a call that only waits. */
export function preemptGraceOf(
  plan: WaitingPlan,
  settings: Pick<EngineSettings, 'preemptGraceMs'>,
): number | undefined {
  return plan.kind === 'preempt' ? (plan.graceMs ?? settings.preemptGraceMs) : undefined;
}

/** Whether the plan waits in line (`'wait'`, `'preempt'`) rather than attempting once. */
export function waits(plan: BusyPlan): plan is WaitingPlan {
  return plan.kind === 'wait' || plan.kind === 'preempt';
}
