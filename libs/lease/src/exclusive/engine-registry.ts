/**
 * Which application's lease engine an `@Exclusive` method runs under, found at call time — so that whoever captured
 * the method, in whichever module order, and lazily loaded modules are covered.
 *
 * 1. The instance's own: `@Exclusive` declares an optional property dependency on its class (`ENGINE_PROPERTY`), so
 *    the injector that creates an instance — singleton, transient or request-scoped, in any of several applications
 *    of one process — hands it its application's engine.
 * 2. For instances no Nest injector made (`new Service()` in a test, say): the application whose container holds the
 *    instance; else the one that provides its class; else the only one running.
 */
import 'reflect-metadata';
import { inspect } from 'node:util';
import type { ModulesContainer } from '@nestjs/core';
import { OPTIONAL_PROPERTY_DEPS_METADATA, PROPERTY_DEPS_METADATA } from '@nestjs/common/constants.js';
import { LeaseConfigError } from '../errors/lease.errors.js';
import type { ServiceEngine } from '../engine/service-engine.js';
import { messages } from '../errors/lease.messages.js';

/** Injection token of the application's `EngineRef` (provided and exported by LeaseModule). */
export const LEASE_ENGINE_REF = Symbol('nest-pg-lease:engine-ref');

/** The property of a decorated class's instances that holds their application's `EngineRef`. */
export const ENGINE_PROPERTY = Symbol('nest-pg-lease:engine');

/** An application's engine, as injected into the instances of decorated classes (shown briefly when they are logged). */
export class EngineRef {
  constructor(readonly engine: ServiceEngine) {}

  [inspect.custom](): string {
    return `[nest-pg-lease: the LeaseService of owner ${this.engine.options.owner}]`;
  }
}

/** Makes Nest's injector give every instance of `type` its application's engine (see the module note). */
export function injectEngineInto(type: Function): void {
  const properties = (Reflect.getMetadata(PROPERTY_DEPS_METADATA, type) as Array<{ key: unknown }> | undefined) ?? [];
  if (properties.some((property) => property.key === ENGINE_PROPERTY)) return;
  Reflect.defineMetadata(
    PROPERTY_DEPS_METADATA,
    [...properties, { key: ENGINE_PROPERTY, type: LEASE_ENGINE_REF }],
    type,
  );
  const optional = (Reflect.getMetadata(OPTIONAL_PROPERTY_DEPS_METADATA, type) as unknown[] | undefined) ?? [];
  Reflect.defineMetadata(OPTIONAL_PROPERTY_DEPS_METADATA, [...optional, ENGINE_PROPERTY], type);
}

/** A running application's lease engine, and the modules (lazily loaded ones included) it serves. */
export interface Registration {
  readonly leases: ServiceEngine;
  readonly modules: ModulesContainer;
}

interface Wrapper {
  instance?: unknown;
  metatype?: unknown;
}

const registrations = new Set<Registration>();
/** Instance → its application's engine, found on its first decorated call. */
const owners = new WeakMap<object, ServiceEngine>();
/**
 * Class → the engine of the one application that provides it, for instances no injector made. Forgotten whenever an
 * application starts or stops.
 */
let classOwners = new WeakMap<Function, ServiceEngine>();

/**
 * Registers an application's engine. A second registration for the same application (LeaseModule imported twice)
 * is refused: which of two engines a method should use could only be guessed.
 */
export function register(registration: Registration): void {
  for (const other of registrations) {
    if (other.modules === registration.modules) {
      throw new LeaseConfigError(messages.moduleImportedTwice());
    }
  }
  registrations.add(registration);
  classOwners = new WeakMap();
}

export function unregister(registration: Registration): void {
  registrations.delete(registration);
  classOwners = new WeakMap();
}

export function wrappersOf(registration: Registration): Wrapper[] {
  return [...registration.modules.values()].flatMap((module) => [
    ...(module.providers.values() as Iterable<Wrapper>),
    ...(module.controllers.values() as Iterable<Wrapper>),
  ]);
}

/** The lease engine an `@Exclusive` method called on `instance` runs under (see the module note). */
export function leaseEngineFor(instance: unknown, label: string): ServiceEngine {
  const self = instance !== null && typeof instance === 'object' ? instance : undefined;
  const own = self && (self as { [ENGINE_PROPERTY]?: unknown })[ENGINE_PROPERTY];
  if (own instanceof EngineRef) return own.engine;
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
    throw new LeaseConfigError(messages.noServiceRunning(label));
  }
  throw new LeaseConfigError(
    messages.instanceOfNoApplication(
      label,
      found.length === 0 ? 'none' : 'several',
      all.length,
      found.length === 0 ? '' : 's',
    ),
  );
}
