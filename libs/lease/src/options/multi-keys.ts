/**
 * Several keys at once (docs/multi-key.md): the bound on a set, and `@Exclusive([t1, t2, …], options)` checked once at
 * decoration — the declaration of its first template (every option checked as for one key), plus the set's own rules,
 * as `LeaseConfigError`s naming the decorator: a non-empty array of at most `MAX_MULTI_KEYS` distinct templates, one
 * holder per key, no `'join'` nor `'preempt'`.
 */
import { LeaseConfigError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { MultiExclusiveOptions } from '../interfaces/multi-lease.interface.js';
import { type ExclusiveMetadata, exclusiveDeclaration } from './busy-policy.js';

/** At most this many keys in one call or declaration. */
export const MAX_MULTI_KEYS = 16;

const refuse = (message: string): never => {
  throw new LeaseConfigError(messages.declared('@Exclusive', message));
};

export function multiExclusiveDeclaration(
  templates: readonly unknown[],
  options: MultiExclusiveOptions = {},
): ExclusiveMetadata {
  if (templates.length === 0) refuse(messages.multiKeysEmpty());
  if (templates.length > MAX_MULTI_KEYS) refuse(messages.multiKeysTooMany(MAX_MULTI_KEYS, templates.length));
  for (const template of templates) {
    if (typeof template !== 'string' || template.length === 0)
      throw new LeaseConfigError(messages.exclusiveKeyMissing());
  }
  const keys = templates as readonly string[];
  const twice = keys.find((template, at) => keys.indexOf(template) !== at);
  if (twice !== undefined) refuse(messages.multiKeyDuplicate(twice));
  const given: unknown = typeof options === 'object' && options !== null ? options : {};
  const { limit, onBusy } = given as { limit?: unknown; onBusy?: unknown };
  if (limit !== undefined && limit !== 1)
    refuse(messages.multiKeyOption(`limit ${JSON.stringify(limit) ?? typeof limit}`));
  const policy = typeof onBusy === 'object' && onBusy !== null ? Object.keys(onBusy)[0] : onBusy;
  if (policy === 'join' || policy === 'preempt') refuse(messages.multiKeyOption(`onBusy '${String(policy)}'`));
  const base = exclusiveDeclaration(keys[0], options);
  return Object.freeze({ ...base, targetKeys: Object.freeze([...keys]) });
}
