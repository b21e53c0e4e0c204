import 'reflect-metadata';
import { Inject, Injectable, Logger, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { MetadataScanner, ModulesContainer } from '@nestjs/core';
import { LeaseConfigError } from './errors.js';
import { EXCLUSIVE_METADATA, ORIGINAL_METHOD } from './lease.constants.js';
import { LeaseEngine } from './lease-engine.js';
import { argumentPlan, checkKeyTemplate, doorOf, type ExclusiveMetadata } from './exclusive-keys.js';
import { currentLeaseFactory } from './decorators/current-lease.decorator.js';

/** A running application's lease engine, and the modules (lazily loaded ones included) it serves. */
interface Registration {
  readonly leases: LeaseEngine;
  readonly modules: ModulesContainer;
}

interface Wrapper {
  instance?: unknown;
  metatype?: unknown;
}

const registrations = new Set<Registration>();
/** Instance → its application's LeaseService, found on its first decorated call. */
const owners = new WeakMap<object, LeaseEngine>();
/**
 * Class → the LeaseService of the one application that provides it: transient and request-scoped providers are new
 * instances every time, and must not cost a search each. Forgotten whenever an application starts or stops.
 */
let classOwners = new WeakMap<Function, LeaseEngine>();

function register(registration: Registration): void {
  registrations.add(registration);
  classOwners = new WeakMap();
}

function unregister(registration: Registration): void {
  registrations.delete(registration);
  classOwners = new WeakMap();
}

function wrappersOf(registration: Registration): Wrapper[] {
  return [...registration.modules.values()].flatMap((module) => [
    ...(module.providers.values() as Iterable<Wrapper>),
    ...(module.controllers.values() as Iterable<Wrapper>),
  ]);
}

/**
 * The lease engine (behind the application's LeaseService) an `@Exclusive` method runs under, found at call time —
 * so that whoever captured the method, in whichever module order, and lazily loaded modules are covered: the
 * application whose container holds the instance; else the one that provides its class (transient and
 * request-scoped providers); else the only one running.
 */
export function leaseEngineFor(instance: unknown, label: string): LeaseEngine {
  const self = instance !== null && typeof instance === 'object' ? instance : undefined;
  const known = self && (owners.get(self) ?? classOwners.get(self.constructor));
  if (known) return known;
  const all = [...registrations];
  let found = self
    ? all.filter((registration) => wrappersOf(registration).some((wrapper) => wrapper.instance === self))
    : [];
  if (found.length === 0 && self) {
    found = all.filter((registration) =>
      wrappersOf(registration).some((wrapper) => wrapper.metatype === self.constructor),
    );
    if (found.length === 1) classOwners.set(self.constructor, found[0].leases);
  }
  if (found.length === 0 && all.length === 1) found = all;
  if (found.length === 1) {
    if (self) owners.set(self, found[0].leases);
    return found[0].leases;
  }
  if (all.length === 0) {
    throw new LeaseConfigError(
      `@Exclusive on ${label}: no LeaseService is running; import LeaseModule.forRoot() in the application`,
    );
  }
  throw new LeaseConfigError(
    `@Exclusive on ${label}: ${found.length === 0 ? 'none' : 'several'} of the ${all.length} Nest applications ` +
      `of this process provide${found.length === 0 ? '' : 's'} this instance; ` +
      'call it on an instance the application created (app.get(…))',
  );
}

/**
 * `@Exclusive` wraps methods where they are defined (at decoration time), so nothing needs replacing here. At
 * bootstrap this registers the application's LeaseService for the wrappers to find, and checks what can be checked
 * before the first call: every key template of a handler can be filled from its parameters, `onBusy: 'skip'` is not
 * on an HTTP handler, and a synchronous provider method is reported (decorated, it returns a Promise).
 */
@Injectable()
export class ExclusiveExplorer implements OnModuleInit, OnApplicationShutdown {
  private readonly logger = new Logger(ExclusiveExplorer.name);
  private readonly registration: Registration;

  // Explicit tokens: toolchains without decorator metadata (esbuild, tsx, vitest) could not inject by type.
  constructor(
    @Inject(ModulesContainer) modules: ModulesContainer,
    @Inject(MetadataScanner) private readonly scanner: MetadataScanner,
    @Inject(LeaseEngine) leases: LeaseEngine,
  ) {
    // Registered at construction: a provider may call a decorated method from its own onModuleInit.
    this.registration = { leases, modules };
    register(this.registration);
  }

  onModuleInit(): void {
    const seen = new Set<unknown>();
    const types = wrappersOf(this.registration).flatMap((wrapper) => [
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
    unregister(this.registration);
  }

  private check(type: Function, name: string, method: Function, metadata: ExclusiveMetadata): void {
    const door = doorOf(method);
    const plan = argumentPlan(type, name, door, currentLeaseFactory);
    if (door === 'http' && metadata.onBusy === 'skip') {
      throw new LeaseConfigError(
        `@Exclusive on ${plan.label}: onBusy: 'skip' is for provider methods and message handlers; ` +
          'an HTTP handler answers 409 (with Retry-After) when the target is busy. ' +
          'Remove onBusy, or call a provider method that has it',
      );
    }
    if (door !== 'provider') checkKeyTemplate(metadata, plan);
    const original = (method as { [ORIGINAL_METHOD]?: Function })[ORIGINAL_METHOD];
    if (door === 'provider' && original && !returnsAsync(type, name, original)) {
      this.logger.warn(
        `@Exclusive on ${plan.label}: the method is synchronous, but decorated it returns a Promise ` +
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
