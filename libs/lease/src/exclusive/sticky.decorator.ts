import type { StickyOptions } from '../interfaces/exclusive-options.interface.js';
import { stickyDeclaration } from '../options/busy-policy.js';
import { decorateMethod } from './decorated-method.js';

/**
 * A sticky owner for a method called on every instance — a `@Cron` job, an event listener: the first call makes this
 * instance a candidate for `targetKey` (leader election); the instance elected keeps the lease across calls (renewed
 * between them) and runs the calls one at a time; on the other instances the call does not run until the owner dies
 * (lease timeout) or shuts down (released at once, or when its call in progress ends). Once per tick for a `@Cron`
 * job, without `holdAtLeastMs`. docs/scheduled-jobs.md.
 *
 * `onBusy` says what a call overlapping the owner's running call does: `'throw'` a `LeaseBusyError` (the default),
 * `'skip'` it (resolves `undefined`, a `busy` event), or `'wait'` its turn. On an instance that is not the owner the
 * call never runs: a `LeaseBusyError` with `'throw'`, skipped with `'skip'` or `'wait'`. A fixed key only: a template
 * with placeholders or a key function is a `LeaseConfigError` here.
 *
 * @example @Cron('* * * * * *') @Sticky('digest', { onBusy: 'skip' }) async run() { … }
 */
export function Sticky(targetKey: string, options?: StickyOptions): MethodDecorator {
  return decorateMethod(stickyDeclaration(targetKey, options), '@Sticky');
}
