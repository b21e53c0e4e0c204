import { applyDecorators, SetMetadata, UseInterceptors } from '@nestjs/common';
import { LeaseConfigError } from '../errors.js';
import type { ExclusiveKey, ExclusiveMetadata, ExclusiveOptions } from '../exclusive.metadata.js';
import { ExclusiveInterceptor } from '../interceptors/exclusive.interceptor.js';
import { EXCLUSIVE_METADATA } from '../lease.constants.js';

/**
 * Runs the method under the lease of `targetKey`, with heartbeats, releasing when it settles.
 *
 * - On a controller handler, an interceptor resolves the key from the request (route params, then query, then body),
 *   and maps lease errors to HTTP (busy → 409 with Retry-After, bad key → 400, lost → 409 "result discarded").
 * - On a provider method, the method is wrapped at bootstrap, so every caller runs it under the lease and gets the
 *   typed `LeaseError`s. `{0}`, `{1}` name arguments; other placeholders are fields of the first argument.
 *
 * Without a priority or wait, a busy target is refused at once; with one, the call waits in the priority line.
 * Inside, `LeaseService.current()` (or `@CurrentLease()`) gives the lease: pass `lease.signal` to `fetch`, save
 * with `lease.fenced(manager => …)`.
 *
 * @example @Exclusive('report:{id}')            // refuse duplicates
 * @example @Exclusive('report:{id}', 10)        // wait in line with priority 10
 * @example @Exclusive((req) => `user:${req.user.id}`, { waitTimeoutMs: 5_000 })
 */
export function Exclusive(targetKey: ExclusiveKey, priorityOrOptions?: number | ExclusiveOptions): MethodDecorator {
  const metadata = exclusiveMetadata(targetKey, priorityOrOptions);
  return applyDecorators(SetMetadata(EXCLUSIVE_METADATA, metadata), UseInterceptors(ExclusiveInterceptor));
}

function exclusiveMetadata(targetKey: ExclusiveKey, priorityOrOptions?: number | ExclusiveOptions): ExclusiveMetadata {
  if (typeof targetKey !== 'function' && (typeof targetKey !== 'string' || targetKey.length === 0)) {
    throw new LeaseConfigError('@Exclusive needs a key template such as "report:{id}" or a function returning the key');
  }
  const options: ExclusiveOptions =
    typeof priorityOrOptions === 'number' ? { priority: priorityOrOptions } : { ...(priorityOrOptions ?? {}) };
  if (options.priority !== undefined && !Number.isInteger(options.priority)) {
    throw new LeaseConfigError(`@Exclusive priority must be an integer, got ${String(options.priority)}`);
  }
  if (options.waitTimeoutMs !== undefined && (!Number.isInteger(options.waitTimeoutMs) || options.waitTimeoutMs < 0)) {
    throw new LeaseConfigError(`@Exclusive waitTimeoutMs must be a non-negative integer, got ${String(options.waitTimeoutMs)}`);
  }
  return { targetKey, ...options };
}
