import type { ExclusiveKey, ExclusiveOptions } from '../interfaces/exclusive-options.interface.js';
import { exclusiveDeclaration } from '../options/busy-policy.js';
import type { MultiExclusiveOptions } from '../interfaces/multi-lease.interface.js';
import { multiExclusiveDeclaration } from '../options/multi-keys.js';
import { decorateMethod } from './decorated-method.js';

/**
 * Runs the method under the lease of `targetKey`, with heartbeats, releasing when it settles — whoever calls it: an
 * HTTP route, a WebSocket gateway, a microservice pattern, a GraphQL resolver, a scheduler, an event listener,
 * another provider.
 *
 * The method is wrapped where it is defined, at decoration time (its metadata and name are kept), and the wrapper
 * finds the application's `LeaseService` at call time: a scheduler or listener that captured the method during
 * bootstrap, in any module order, or a lazily loaded module still goes through the lease.
 *
 * Keys come from the arguments the method receives — for handlers, after pipes (`ParseIntPipe` makes `/report/007`
 * the same key as `/report/7`). `{0}`, `{1}` name arguments by position; `{id}` the parameter a decorator names
 * (`@Param('id')`, `@Body('id')`, `@Query('id')`, `@Headers('id')`, `@MessageBody('id')`, `@Payload('id')`,
 * `@Args('id')`); otherwise
 * a field of the whole route params (`@Param()`), then of the whole body (`@Body()` / `@MessageBody()` /
 * `@Payload()`) — never of a query string the handler did not declare. On provider methods, `{id}` is a field of the
 * first argument. A function receives the arguments.
 *
 * A busy target does what `onBusy` says (see `BusyPolicy`): refused at once (`'throw'`, the default:
 * `LeaseBusyError`, HTTP 409), skipped (`'skip'`: the call quietly resolves `undefined`), a wait in line (`'wait'`), the
 * outcome of the run holding it (`'join'`) or a takeover from a holder of lower priority (`'preempt'`). The shorthand
 * `@Exclusive(key, priority)` waits in line with that priority. `holdAtLeastMs` keeps the target taken for that long
 * after the acquisition. The decorated method always returns a Promise (an Observable result is held until it
 * completes).
 *
 * @example @Exclusive('report:{id}')                               // refuse duplicates
 * @example @Exclusive('report:{id}', 10)                           // wait in line with priority 10
 * @example @Exclusive('report:{id}', { onBusy: { wait: { timeoutMs: 5_000 } } })
 * @example @Exclusive('digest', { holdAtLeastMs: 5_000, onBusy: 'skip' })   // with @Cron: once per tick
 */
export function Exclusive(targetKey: ExclusiveKey, priorityOrOptions?: number | ExclusiveOptions): MethodDecorator;
/**
 * Runs the method under a lease on every key its templates make (at most 16), taken all or none in one global order,
 * released together when it settles (docs/multi-key.md): `@Exclusive(['account:{id}', 'invoice:{invoiceId}'])`.
 * `@CurrentLease()` is the call's `MultiLease`; `current()` inside is the last key's lease. The method's result must be
 * a value or a Promise (an Observable is refused).
 */
export function Exclusive(targetKeys: readonly string[], options?: MultiExclusiveOptions): MethodDecorator;
export function Exclusive(
  targetKey: ExclusiveKey | readonly string[],
  priorityOrOptions?: number | ExclusiveOptions | MultiExclusiveOptions,
): MethodDecorator {
  const metadata = Array.isArray(targetKey)
    ? multiExclusiveDeclaration(targetKey, priorityOrOptions as MultiExclusiveOptions | undefined)
    : exclusiveDeclaration(targetKey as ExclusiveKey, priorityOrOptions);
  return decorateMethod(metadata, '@Exclusive');
}
