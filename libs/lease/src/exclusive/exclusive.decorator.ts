import 'reflect-metadata';
import { UseInterceptors } from '@nestjs/common';
import { LeaseConfigError, LeaseKeyError } from '../errors/lease.errors.js';
import { injectEngineInto } from './engine-registry.js';
import { callExclusive } from './exclusive-call.js';
import type { ExclusiveKey, ExclusiveOptions } from '../interfaces/exclusive-options.interface.js';
import { assertTargetKey, exclusiveMetadata } from '../options/call-input.js';
import { fillKeyTemplate } from './argument-plan.js';
import { ExclusiveInterceptor } from './exclusive.interceptor.js';
import { EXCLUSIVE_METADATA, ORIGINAL_METHOD } from '../lease.internal-constants.js';
import { messages } from '../errors/lease.messages.js';

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
 * Without a priority or wait, a busy target is refused at once (`LeaseBusyError`; HTTP 409) or, with
 * `onBusy: 'skip'`, the call quietly resolves `undefined`. With a priority or `waitTimeoutMs` the call waits in line.
 * `holdAtLeastMs` keeps the target taken for that long after the acquisition. The decorated method always returns a
 * Promise (an Observable result is held until it completes).
 *
 * @example @Exclusive('report:{id}')                         // refuse duplicates
 * @example @Exclusive('report:{id}', 10)                     // wait in line with priority 10
 * @example @Exclusive('digest', { holdAtLeastMs: 5_000, onBusy: 'skip' })   // with @Cron: once per tick
 */
export function Exclusive(targetKey: ExclusiveKey, priorityOrOptions?: number | ExclusiveOptions): MethodDecorator {
  const metadata = exclusiveMetadata(targetKey, priorityOrOptions);
  return (target: object, methodName: string | symbol, descriptor: PropertyDescriptor) => {
    const original: unknown = descriptor.value;
    if (typeof original !== 'function') {
      throw new LeaseConfigError(messages.exclusiveNotOnMethod(String(methodName)));
    }
    const declaringClass = typeof target === 'function' ? target : target.constructor;
    checkTemplateText(metadata.targetKey, `${declaringClass.name}.${String(methodName)}`);
    injectEngineInto(declaringClass);
    const wrapped = function (this: unknown, ...args: unknown[]): Promise<unknown> {
      return callExclusive(this, wrapped, original, metadata, declaringClass, methodName, args);
    };
    // Decorators applied before this one wrote their metadata on the original; those applied after write on the
    // wrapper.
    for (const key of Reflect.getOwnMetadataKeys(original)) {
      Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, original), wrapped);
    }
    Object.defineProperty(wrapped, 'name', { value: original.name });
    Object.defineProperty(wrapped, 'length', { value: original.length });
    Object.defineProperty(wrapped, ORIGINAL_METHOD, { value: original });
    descriptor.value = wrapped;
    Reflect.defineMetadata(EXCLUSIVE_METADATA, metadata, wrapped);
    // The controller door: on HTTP, WebSocket, microservice and GraphQL handlers it maps errors for the transport and ends the
    // call's wait when the caller goes away; on provider methods Nest never runs it.
    UseInterceptors(ExclusiveInterceptor)(target, methodName, descriptor);
  };
}

/**
 * What a key template's own text already decides, checked where it is written: filled with the shortest values
 * (one character per placeholder), it must make a valid key — at most 255 bytes, no NUL, no lone surrogate. Where
 * each placeholder comes from is checked at bootstrap, when the method's door is known.
 */
function checkTemplateText(targetKey: unknown, label: string): void {
  if (typeof targetKey !== 'string') return;
  try {
    assertTargetKey(fillKeyTemplate(targetKey, () => '0'));
  } catch (error) {
    if (!(error instanceof LeaseKeyError)) throw error;
    throw new LeaseConfigError(messages.templateNeverValid(label, error.message));
  }
}
