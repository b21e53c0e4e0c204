/**
 * How `@Exclusive` and `@Sticky` put their wrapper in place at decoration time: the method replaced by one that runs
 * it under the lease (`wrapMethod`, exclusive-call.ts), its metadata and name kept, the declaration recorded, the handler door's
 * interceptor bound, and the declaring class told to receive its application's engine.
 */
import 'reflect-metadata';
import { UseInterceptors } from '@nestjs/common';
import { LeaseConfigError, LeaseKeyError } from '../errors/lease.errors.js';
import { injectEngineInto } from './engine-registry.js';
import { wrapMethod } from './exclusive-call.js';
import { fillKeyTemplate, METHOD_PLANS } from './call-plan.js';
import { assertTargetKey } from '../options/call-input.js';
import type { ExclusiveMetadata } from '../options/busy-policy.js';
import { ExclusiveInterceptor } from './exclusive.interceptor.js';
import { EXCLUSIVE_METADATA, ORIGINAL_METHOD } from '../lease.internal-constants.js';
import { messages } from '../errors/lease.messages.js';

/** The decorator of a checked declaration (`exclusiveDeclaration`, `stickyDeclaration`). */
export function decorateMethod(metadata: ExclusiveMetadata, decorator: '@Exclusive' | '@Sticky'): MethodDecorator {
  return (target: object, methodName: string | symbol, descriptor: PropertyDescriptor) => {
    const original: unknown = descriptor.value;
    if (typeof original !== 'function') {
      throw new LeaseConfigError(messages.exclusiveNotOnMethod(decorator, String(methodName)));
    }
    const declaringClass = typeof target === 'function' ? target : target.constructor;
    for (const template of metadata.targetKeys ?? [metadata.targetKey]) {
      checkTemplateText(template, `${declaringClass.name}.${String(methodName)}`, decorator);
    }
    injectEngineInto(declaringClass);
    const method = wrapMethod(original, declaringClass, methodName, metadata);
    const { wrapped } = method;
    // Decorators applied before this one wrote their metadata on the original; those applied after write on the
    // wrapper.
    for (const key of Reflect.getOwnMetadataKeys(original)) {
      Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, original), wrapped);
    }
    Object.defineProperty(wrapped, 'name', { value: original.name });
    Object.defineProperty(wrapped, 'length', { value: original.length });
    Object.defineProperty(wrapped, ORIGINAL_METHOD, { value: original });
    Object.defineProperty(wrapped, METHOD_PLANS, { value: method.plans });
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
function checkTemplateText(targetKey: unknown, label: string, decorator: string): void {
  if (typeof targetKey !== 'string') return;
  try {
    assertTargetKey(fillKeyTemplate(targetKey, () => '0'));
  } catch (error) {
    if (!(error instanceof LeaseKeyError)) throw error;
    throw new LeaseConfigError(messages.templateNeverValid(decorator, label, error.message));
  }
}
