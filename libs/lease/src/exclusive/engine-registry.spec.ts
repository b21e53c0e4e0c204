import 'reflect-metadata';
import { inspect } from 'node:util';
import { Injectable, Module, Scope } from '@nestjs/common';
import { ContextIdFactory, type ModulesContainer, NestFactory } from '@nestjs/core';
import { LeaseConfigError } from '../errors/lease.errors.js';
import type { LeaseEngine } from '../engine/lease-engine.js';
import { ENGINE_PROPERTY, EngineRef, EngineRegistry, injectEngineInto, LEASE_ENGINE_REF } from './engine-registry.js';

const engine = (owner: string) => ({ options: { owner } }) as unknown as LeaseEngine;
/** A container of one module providing `instances` (and their classes). */
const container = (...instances: object[]) =>
  new Map([
    [
      'm',
      {
        providers: new Map(instances.map((instance, i) => [i, { instance, metatype: instance.constructor }])),
        controllers: new Map(),
      },
    ],
  ]) as unknown as ModulesContainer;
/** An application's entry, filled as its explorer fills it at module init. */
const entryOf = (owner: string, modules: ModulesContainer) => {
  const entry = new EngineRef(engine(owner));
  entry.fill(modules);
  return entry;
};

/** Which application's engine an @Exclusive call runs under. */
describe('engine registry', () => {
  it("Nest's injector hands every instance of a decorated class its application's EngineRef, whatever its scope", async () => {
    @Injectable()
    class Singleton {}
    @Injectable({ scope: Scope.REQUEST })
    class PerRequest {}
    injectEngineInto(Singleton);
    injectEngineInto(Singleton);
    injectEngineInto(PerRequest);
    const entry = new EngineRef(engine('a'));
    @Module({ providers: [Singleton, PerRequest, { provide: LEASE_ENGINE_REF, useValue: entry }] })
    class AppModule {}
    const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
    try {
      const registry = new EngineRegistry();
      expect(registry.entryFor(app.get(Singleton), 'Singleton.m')).toBe(entry);
      expect(registry.entryFor(await app.resolve(PerRequest, ContextIdFactory.create()), 'PerRequest.m')).toBe(entry);
    } finally {
      await app.close();
    }
  });

  it('the property is optional: a class provided where no LeaseModule is imported is still made', async () => {
    @Injectable()
    class Alone {}
    injectEngineInto(Alone);
    @Module({ providers: [Alone] })
    class AppModule {}
    const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
    try {
      expect(app.get<Alone, { [ENGINE_PROPERTY]?: unknown }>(Alone)[ENGINE_PROPERTY]).toBeUndefined();
    } finally {
      await app.close();
    }
  });

  it('otherwise: the application that holds the instance, then the one that provides its class, then the only one', () => {
    class A {}
    class B {}
    const a = new A();
    const registry = new EngineRegistry();
    const first = entryOf('1', container(a));
    const second = entryOf('2', container(new B()));
    registry.register(first, container());
    expect(registry.entryFor({}, 'Plain.m')).toBe(first);
    registry.register(second, container());
    expect(registry.entryFor(a, 'A.m')).toBe(first);
    expect(registry.entryFor(new B(), 'B.m')).toBe(second);
    expect(() => registry.entryFor({}, 'Plain.m')).toThrow(/none of the 2 Nest applications/);
    const both = entryOf('3', container(new A()));
    registry.register(both, container());
    expect(() => registry.entryFor(new A(), 'A.m')).toThrow(/several of the 3 Nest applications/);
    registry.unregister(both);
    registry.unregister(second);
    expect(registry.entryFor({}, 'Plain.m')).toBe(first);
  });

  it('with no application running, a call names the method and says what to import', () => {
    const registry = new EngineRegistry();
    expect(() => registry.entryFor({}, 'Lonely.m')).toThrow(LeaseConfigError);
    expect(() => registry.entryFor({}, 'Lonely.m')).toThrow(/@Exclusive on Lonely\.m: no LeaseService is running/);
  });

  it('a second LeaseModule in one application is refused', () => {
    const registry = new EngineRegistry();
    const modules = container();
    registry.register(new EngineRef(engine('1')), modules);
    expect(() => registry.register(new EngineRef(engine('2')), modules)).toThrow(/imported more than once/);
  });

  it('an EngineRef shows its owner when logged, not the engine', () => {
    expect(inspect(new EngineRef(engine('host:1')))).toBe('[nest-pg-lease: the LeaseService of owner host:1]');
  });
});
