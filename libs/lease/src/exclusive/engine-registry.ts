/**
 * Which application's lease engine an `@Exclusive` method runs under, found at call time through one named registry
 * (`engines`): the method is wrapped at decoration, before any application exists, so the wrapper asks the registry.
 *
 * 1. The instance's own application: its injector handed it the application's `EngineRef` (an optional property
 *    dependency the decoration declares with Nest's public `@Optional() @Inject(LEASE_ENGINE_REF)`). This is what
 *    tells apart request-scoped and transient instances of one class provided by two applications of one process:
 *    Nest keeps no public link from such an instance to its application, and its class alone is ambiguous.
 * 2. Instances no injector made (`new Service()` in a test, say): the application whose explorer found the instance
 *    at module init; else the one that provides its class; else the only one running. The same errors as before for
 *    the ambiguous cases (none running; none or several of several applications).
 */
import 'reflect-metadata';
import { inspect } from 'node:util';
import { Inject, Optional } from '@nestjs/common';
import type { ModulesContainer } from '@nestjs/core';
import { LeaseConfigError } from '../errors/lease.errors.js';
import type { ServiceEngine } from '../engine/service-engine.js';
import { LeaderCandidates } from '../leader/candidates.js';
import { messages } from '../errors/lease.messages.js';

/** Injection token of the application's `EngineRef` (provided and exported by LeaseModule). */
export const LEASE_ENGINE_REF = Symbol('nest-pg-lease:engine-ref');

/** The property of a decorated class's instances that holds their application's `EngineRef`. */
export const ENGINE_PROPERTY = Symbol('nest-pg-lease:engine');

interface Wrapper {
  instance?: unknown;
  metatype?: unknown;
}

/**
 * One application's entry in the registry: its engine and leader candidates, and the instances and classes its
 * explorer found at module init. Injected into the instances of decorated classes (shown briefly when they are logged).
 */
export class EngineRef {
  private readonly instances = new WeakSet<object>();
  private readonly classes = new WeakSet<Function>();
  private attached?: LeaderCandidates;

  constructor(readonly engine: ServiceEngine) {}

  /** The application's leader candidates (its `@Sticky` owners among them): its LeaseService's, once attached. */
  get candidates(): LeaderCandidates {
    return (this.attached ??= new LeaderCandidates(this.engine));
  }

  /** Shares the application's LeaseService's candidates (the explorer, at construction). */
  attach(candidates: LeaderCandidates): void {
    this.attached = candidates;
  }

  /** Records the providers' and controllers' instances and classes of `modules` (the explorer, at module init). */
  fill(modules: ModulesContainer): void {
    for (const wrapper of wrappersOf(modules)) {
      if (typeof wrapper.instance === 'object' && wrapper.instance !== null) this.instances.add(wrapper.instance);
      if (typeof wrapper.metatype === 'function') this.classes.add(wrapper.metatype);
      const type = (wrapper.instance as object | undefined)?.constructor;
      if (typeof type === 'function') this.classes.add(type);
    }
  }

  holds(instance: object): boolean {
    return this.instances.has(instance);
  }

  provides(type: Function): boolean {
    return this.classes.has(type);
  }

  [inspect.custom](): string {
    return `[nest-pg-lease: the LeaseService of owner ${this.engine.options.owner}]`;
  }
}

/** Every provider and controller of an application's modules (lazily loaded ones included, once loaded). */
export function wrappersOf(modules: ModulesContainer): Wrapper[] {
  return [...modules.values()].flatMap((module) => [
    ...(module.providers.values() as Iterable<Wrapper>),
    ...(module.controllers.values() as Iterable<Wrapper>),
  ]);
}

/** Makes Nest's injector give every instance of `type` its application's `EngineRef` (see the module note). */
export function injectEngineInto(type: Function): void {
  if (Reflect.hasOwnMetadata(ENGINE_PROPERTY, type)) return;
  Reflect.defineMetadata(ENGINE_PROPERTY, true, type);
  const prototype = type.prototype as object;
  Inject(LEASE_ENGINE_REF)(prototype, ENGINE_PROPERTY);
  Optional()(prototype, ENGINE_PROPERTY);
}

/**
 * The running applications' entries. One per process: a decorated method is shared by every application that
 * provides its class, and the fallbacks (an instance no injector made, the only application running) need them all.
 */
export class EngineRegistry {
  private readonly running = new Map<EngineRef, ModulesContainer>();

  /**
   * Registers an application's entry (its explorer, at construction). A second registration for the same application
   * (LeaseModule imported twice) is refused: which of two engines a method should use could only be guessed.
   */
  register(entry: EngineRef, modules: ModulesContainer): void {
    for (const other of this.running.values()) {
      if (other === modules) throw new LeaseConfigError(messages.moduleImportedTwice());
    }
    this.running.set(entry, modules);
  }

  unregister(entry: EngineRef): void {
    this.running.delete(entry);
  }

  /** The entry an `@Exclusive` method called on `instance` runs under (see the module note). */
  entryFor(instance: unknown, label: string): EngineRef {
    const self = instance !== null && typeof instance === 'object' ? instance : undefined;
    const own = self && (self as { [ENGINE_PROPERTY]?: unknown })[ENGINE_PROPERTY];
    if (own instanceof EngineRef) return own;
    const all = [...this.running.keys()];
    let found = self ? all.filter((entry) => entry.holds(self)) : [];
    if (found.length === 0 && self) found = all.filter((entry) => entry.provides(self.constructor));
    if (found.length === 0 && all.length === 1) found = all;
    if (found.length === 1) return found[0];
    if (all.length === 0) throw new LeaseConfigError(messages.noServiceRunning(label));
    throw new LeaseConfigError(
      messages.instanceOfNoApplication(
        label,
        found.length === 0 ? 'none' : 'several',
        all.length,
        found.length === 0 ? '' : 's',
      ),
    );
  }
}

/** The registry of this process (the explorers fill it; the wrappers of decorated methods read it). */
export const engines = new EngineRegistry();
