/**
 * The static part of a decorated method's calls, built once per method (per class that inherits it: the label and the
 * parameter decorators are the class's): the argument plan, the key template parsed with the argument each
 * placeholder reads, the template a call's traces name it by, the declaration's checked values and busy policy. The
 * explorer builds it at bootstrap (which checks the template against the signature); a method no explorer saw builds
 * it on its first call. Per call, only the key is built (`keyOf`: the values the placeholders read, filled by the
 * rules of `fillKeyTemplate`) and checked (`CallPlan.call`).
 */
import { LeaseKeyError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { ExclusiveMetadata, LeaseCall } from '../options/busy-policy.js';
import { requestOf } from '../options/call-input.js';
import {
  type ArgumentPlan,
  argumentPlan,
  type Door,
  doorOf,
  type PlaceholderSource,
  sourceOf,
} from './argument-plan.js';
import { currentLeaseFactory } from './current-lease-factory.js';

/** The property of a decorated method's wrapper that holds its plans (the explorer builds them at bootstrap). */
export const METHOD_PLANS = Symbol('nest-pg-lease:method-plans');

/** The plans of a decorated method's wrapper, if it is one. */
export function plansOf(method: Function): MethodPlans | undefined {
  return (method as { [METHOD_PLANS]?: MethodPlans })[METHOD_PLANS];
}

/** One decorated method's calls, as planned once (see the module note). */
export class CallPlan {
  readonly door: Door;
  /** `Class.method`, for messages. */
  readonly label: string;
  /** Where `@CurrentLease()` wants the lease. */
  readonly leaseSlots: readonly number[];
  /** What traces and metrics name the call by: its template (a key function: the method), never the key. */
  readonly keyTemplate: string;
  /** The target key of one call, from the arguments the method received (after pipes, for handlers). */
  readonly keyOf: (args: readonly unknown[]) => string;
  /** `@Exclusive([t1, t2, …])`: every key of one call, one per template (each template compiled, so checked, here). */
  readonly keysOf?: (args: readonly unknown[]) => string[];

  constructor(
    readonly metadata: ExclusiveMetadata,
    arguments_: ArgumentPlan,
  ) {
    this.door = arguments_.door;
    this.label = arguments_.label;
    this.leaseSlots = arguments_.leaseSlots;
    const { targetKey } = metadata;
    this.keyTemplate = (typeof targetKey === 'string' ? targetKey : arguments_.label).slice(0, 255);
    this.keyOf =
      typeof targetKey === 'string' ? compiledTemplate(targetKey, arguments_) : keyFunction(metadata, this.label);
    if (metadata.targetKeys) {
      const keys = metadata.targetKeys.map((template) => compiledTemplate(template, arguments_));
      this.keysOf = (args) => keys.map((keyOf) => keyOf(args));
      this.keyTemplate = metadata.targetKeys.join(' + ').slice(0, 255);
    }
  }

  /** One call of the key `targetKey`: the key checked (the call's one check: the rest was checked at decoration). */
  call(targetKey: string, signal?: AbortSignal): LeaseCall {
    const { priority, holdMs, limit, leaseTimeoutMs, busy, retryAfter } = this.metadata;
    const request = requestOf(targetKey, priority, holdMs, this.keyTemplate, limit, leaseTimeoutMs);
    // One object per call, no spread of optional parts: a call with neither (nearly all) is `{ request, busy }`.
    if (signal === undefined && retryAfter === undefined) return { request, busy };
    const call: { -readonly [K in keyof LeaseCall]: LeaseCall[K] } = { request, busy };
    if (signal !== undefined) call.signal = signal;
    if (retryAfter !== undefined) call.retryAfter = retryAfter;
    return call;
  }
}

/**
 * The plans of one decorated method, by the class it is called on (the declaring class, or a subclass that inherits
 * the method). Held by the method's wrapper: no module-level state.
 */
export class MethodPlans {
  private readonly plans = new WeakMap<Function, CallPlan>();

  constructor(
    private readonly metadata: ExclusiveMetadata,
    private readonly methodName: string | symbol,
    /** The wrapper as the class holds it (its door is read from its metadata, complete once decoration ended). */
    private readonly wrapped: () => Function,
  ) {}

  /** The plan for calls on instances of `owner`, built on first use (a `LeaseConfigError` for a bad template). */
  of(owner: Function): CallPlan {
    let plan = this.plans.get(owner);
    if (!plan) {
      const arguments_ = argumentPlan(owner, this.methodName, doorOf(this.wrapped()), currentLeaseFactory);
      this.plans.set(owner, (plan = new CallPlan(this.metadata, arguments_)));
    }
    return plan;
  }
}

/**
 * A key template parsed once, each placeholder's argument resolved once (`sourceOf`: a `LeaseConfigError` here for the
 * first placeholder the signature cannot fill); the same parser and rules as `fillKeyTemplate`.
 */
function compiledTemplate(template: string, plan: ArgumentPlan): (args: readonly unknown[]) => string {
  const literals: string[] = [];
  const readers: Array<(args: readonly unknown[]) => string> = [];
  let from = 0;
  for (const match of template.matchAll(PLACEHOLDER)) {
    literals.push(template.slice(from, match.index));
    const name = match[1].trim();
    const source = sourceOf(plan, name);
    readers.push((args) => keyPart(template, name, valueOf(source, args)));
    from = match.index + match[0].length;
  }
  if (readers.length === 0) return () => template;
  literals.push(template.slice(from));
  return (args) => {
    let key = literals[0];
    for (let i = 0; i < readers.length; i++) key += readers[i](args) + literals[i + 1];
    return key;
  };
}

/** A key function's key: a string, else a `LeaseKeyError` naming the method. */
function keyFunction(metadata: ExclusiveMetadata, label: string): (args: readonly unknown[]) => string {
  const keyOf = metadata.targetKey as (...args: unknown[]) => unknown;
  return (args) => {
    const key = keyOf(...args);
    if (typeof key !== 'string') {
      throw new LeaseKeyError(messages.keyFunctionNotString(label, key === null ? 'null' : typeof key));
    }
    return key;
  };
}

/** The value one placeholder reads in one call, from the arguments the method received (after pipes). */
function valueOf(source: PlaceholderSource, args: readonly unknown[]): unknown {
  if ('index' in source)
    return source.path === undefined ? args[source.index] : readPath(args[source.index], source.path);
  for (const whole of source.wholes) {
    const value = readPath(args[whole.index], source.path);
    if (!absent(value)) return value;
  }
  return undefined;
}

/** A placeholder of a key template: `{id}`, `{0}`, `{order.id}`. */
export const PLACEHOLDER = /\{([^{}]+)\}/g;

/**
 * Fills a key template such as `'report:{id}'`. `lookup` returns the value of a placeholder or undefined; a
 * placeholder that resolves to nothing (undefined, null, empty string, object) is a `LeaseKeyError`, never a lease on
 * "report:undefined".
 */
export function fillKeyTemplate(template: string, lookup: (name: string) => unknown): string {
  // Not checked here: the call's key is checked once where its request is made (`requestOf`), and the decoration
  // checks the template's own text (`checkTemplateText`).
  return template.replace(PLACEHOLDER, (_, rawName: string) => {
    const name = rawName.trim();
    return keyPart(template, name, lookup(name));
  });
}

/** A placeholder's value in a key: nothing (undefined, null, empty string, object) is a `LeaseKeyError`. */
function keyPart(template: string, name: string, value: unknown): string {
  if (
    value === undefined ||
    value === null ||
    value === '' ||
    (typeof value === 'object' && !(value instanceof Date))
  ) {
    throw new LeaseKeyError(messages.placeholderEmpty(template, name));
  }
  if (value instanceof Date) return value.toISOString();
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- objects other than a Date were refused above
  return String(value);
}

function readPath(source: unknown, path: string): unknown {
  let value: unknown = source;
  for (const part of path.split('.')) {
    if (value === null || value === undefined || typeof value !== 'object') return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

const absent = (value: unknown) => value === undefined || value === null || value === '';
