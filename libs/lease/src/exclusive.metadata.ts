import type { ExecutionContext } from '@nestjs/common';
import type { AcquireOptions } from './lease.types.js';
import { LeaseKeyError } from './errors.js';
import { fillKeyTemplate } from './target-key.js';

/** A key template such as `'report:{id}'`, or a function of the request (controllers) / the arguments (providers). */
export type ExclusiveKey = string | ((...args: any[]) => string);

export interface ExclusiveOptions {
  /** Waits in the priority line (higher first) instead of refusing a busy target. */
  priority?: number;
  /** Waits in line up to this long (priority 0 unless given). */
  waitTimeoutMs?: number;
  /** After release, the target stays taken until this long after the acquisition. */
  holdAtLeastMs?: number;
  /** What a busy target does to the call: `'throw'` a `LeaseBusyError`, or `'skip'` the method quietly. */
  onBusy?: 'throw' | 'skip';
}

/** What `@Exclusive` records on the method. */
export interface ExclusiveMetadata extends ExclusiveOptions {
  targetKey: ExclusiveKey;
}

export function acquireOptionsOf(metadata: ExclusiveMetadata): AcquireOptions {
  const options: AcquireOptions = {};
  if (metadata.priority !== undefined) options.priority = metadata.priority;
  if (metadata.waitTimeoutMs !== undefined) options.waitTimeoutMs = metadata.waitTimeoutMs;
  return options;
}

function readPath(source: unknown, path: string): unknown {
  let value: unknown = source;
  for (const part of path.split('.')) {
    if (value === null || value === undefined || typeof value !== 'object') return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

function keyFromFunction(produce: (...args: any[]) => string, args: unknown[]): string {
  const key = produce(...args);
  if (typeof key !== 'string') {
    throw new LeaseKeyError(`The @Exclusive key function returned ${key === null ? 'null' : typeof key}, not a string`);
  }
  return key;
}

/** Controllers: placeholders come from route params, then query, then body; a function receives the request. */
export function controllerTargetKey(metadata: ExclusiveMetadata, context: ExecutionContext): string {
  const source =
    context.getType() === 'http' ? context.switchToHttp().getRequest<Record<string, unknown>>() : context.getArgByIndex(0);
  if (typeof metadata.targetKey === 'function') return keyFromFunction(metadata.targetKey, [source]);
  if (context.getType() !== 'http') return fillKeyTemplate(metadata.targetKey, (name) => readPath(source, name));
  const request = source as { params?: unknown; query?: unknown; body?: unknown };
  return fillKeyTemplate(metadata.targetKey, (name) => {
    for (const bag of [request.params, request.query, request.body]) {
      const value = readPath(bag, name);
      if (value !== undefined && value !== null && value !== '') return value;
    }
    return undefined;
  });
}

/** Providers: `{0}`, `{1}` name arguments by position, other placeholders fields of the first argument. */
export function providerTargetKey(metadata: ExclusiveMetadata, args: unknown[]): string {
  if (typeof metadata.targetKey === 'function') return keyFromFunction(metadata.targetKey, args);
  return fillKeyTemplate(metadata.targetKey, (name) => {
    const [head, ...rest] = name.split('.');
    if (/^\d+$/.test(head)) return rest.length ? readPath(args[Number(head)], rest.join('.')) : args[Number(head)];
    return readPath(args[0], name);
  });
}
