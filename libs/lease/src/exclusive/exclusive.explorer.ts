import 'reflect-metadata';
import { Inject, Injectable, Logger, type OnApplicationShutdown, type OnModuleInit, Optional } from '@nestjs/common';
import { MetadataScanner, ModulesContainer } from '@nestjs/core';
import { LeaseConfigError } from '../errors/lease.errors.js';
import { EXCLUSIVE_METADATA, ORIGINAL_METHOD } from '../lease.internal-constants.js';
import { EngineRef, engines, LEASE_ENGINE_REF, wrappersOf } from './engine-registry.js';
import { candidatesOf } from '../engine-of.js';
import { LeaseService } from '../lease.service.js';
import type { ExclusiveMetadata } from '../options/busy-policy.js';
import { argumentPlan, doorOf } from './argument-plan.js';
import { CallPlan, plansOf } from './call-plan.js';
import { currentLeaseFactory } from './current-lease-factory.js';
import { messages } from '../errors/lease.messages.js';
import { checkLeaseTimeout } from '../options/lease-timeout.js';

/**
 * `@Exclusive` wraps methods where they are defined (at decoration time), so nothing needs replacing here. It
 * registers the application's entry (`EngineRef`) in the registry for the wrappers to find — at construction, filled
 * with the application's instances and classes at module init — and checks what can be checked
 * before the first call: every key template of a handler can be filled from its parameters, `onBusy: 'skip'` is not
 * on an HTTP handler (nor a `@Sticky` `'wait'`, which skips on the instances that do not own the key), and a
 * synchronous provider method is reported (decorated, it returns a Promise).
 */
@Injectable()
export class ExclusiveExplorer implements OnModuleInit, OnApplicationShutdown {
  private readonly logger = new Logger(ExclusiveExplorer.name);
  /** Set when this application already had a LeaseModule: bootstrap fails with it (see `EngineRegistry.register`). */
  private readonly refusal?: LeaseConfigError;

  // Explicit tokens: toolchains without decorator metadata (esbuild, tsx, vitest) could not inject by type.
  constructor(
    @Inject(ModulesContainer) private readonly modules: ModulesContainer,
    @Inject(MetadataScanner) private readonly scanner: MetadataScanner,
    @Inject(LEASE_ENGINE_REF) private readonly entry: EngineRef,
    @Optional() @Inject(LeaseService) leases?: LeaseService,
  ) {
    // One set of leader candidates per application: the LeaseService's (elect(), @LeaderElection, @Sticky).
    if (leases) entry.attach(candidatesOf(leases));
    // Registered at construction: a provider may call a decorated method from its own onModuleInit.
    try {
      engines.register(entry, modules);
    } catch (error) {
      this.refusal = error as LeaseConfigError;
    }
  }

  onModuleInit(): void {
    if (this.refusal) throw this.refusal;
    this.entry.fill(this.modules);
    const seen = new Set<unknown>();
    const types = wrappersOf(this.modules).flatMap((wrapper) => [
      wrapper.metatype,
      (wrapper.instance as object | undefined)?.constructor,
    ]);
    for (const type of types) {
      if (typeof type !== 'function' || seen.has(type) || !type.prototype) continue;
      seen.add(type);
      for (const name of this.scanner.getAllMethodNames(type.prototype)) {
        const method = (type.prototype as Record<string, unknown>)[name];
        const metadata =
          typeof method === 'function'
            ? (Reflect.getMetadata(EXCLUSIVE_METADATA, method) as ExclusiveMetadata | undefined)
            : undefined;
        if (metadata) this.check(type, name, method as Function, metadata);
      }
    }
  }

  onApplicationShutdown(): void {
    if (!this.refusal) engines.unregister(this.entry);
  }

  private check(type: Function, name: string, method: Function, metadata: ExclusiveMetadata): void {
    const door = doorOf(method);
    const label = `${type.name}.${name}`;
    // An HTTP handler must answer: a busy target is a 409, never a call that silently did not run.
    const { busy, sticky } = metadata;
    if (door === 'http' && (busy.kind === 'skip' || (sticky && busy.kind === 'wait'))) {
      throw new LeaseConfigError(messages.skipOnHttpHandler(sticky ? '@Sticky' : '@Exclusive', label, busy.kind));
    }
    // The method's static call plan, built now: every placeholder of the template is checked against the signature
    // (what the template's own text decides — its length, NUL, lone surrogates — was checked at decoration time).
    // Its lease length, against the module's timing (the value itself was checked at decoration time).
    const { leaseTimeoutMs } = metadata;
    const refusal =
      leaseTimeoutMs === undefined ? undefined : checkLeaseTimeout(leaseTimeoutMs, this.entry.engine.options);
    if (refusal !== undefined) throw new LeaseConfigError(messages.declaredOn('@Exclusive', label, refusal));
    const plans = plansOf(method);
    if (plans) plans.of(type);
    else new CallPlan(metadata, argumentPlan(type, name, door, currentLeaseFactory));
    const original = (method as { [ORIGINAL_METHOD]?: Function })[ORIGINAL_METHOD];
    if (door === 'provider' && original && !returnsAsync(type, name, original)) {
      this.logger.warn(
        `@Exclusive on ${label}: the method is synchronous, but decorated it returns a Promise ` +
          '(acquiring the lease takes a database round trip): declare it async and await it',
      );
    }
  }
}

/** An async function, or declared to return a Promise or an Observable (TypeScript's design:returntype). */
function returnsAsync(type: Function, name: string, original: Function): boolean {
  if (original.constructor?.name === 'AsyncFunction' || original.constructor?.name === 'AsyncGeneratorFunction')
    return true;
  const declared = Reflect.getMetadata('design:returntype', type.prototype, name) as Function | undefined;
  return declared === Promise || declared?.name === 'Observable';
}
