import 'reflect-metadata';
import { inspect } from 'node:util';
import { OPTIONAL_PROPERTY_DEPS_METADATA, PROPERTY_DEPS_METADATA } from '@nestjs/common/constants.js';
import type { ModulesContainer } from '@nestjs/core';
import { LeaseConfigError } from '../errors/lease.errors.js';
import type { LeaseEngine } from '../engine/lease-engine.js';
import {
  ENGINE_PROPERTY,
  EngineRef,
  injectEngineInto,
  LEASE_ENGINE_REF,
  leaseEngineFor,
  register,
  type Registration,
  unregister,
} from './engine-registry.js';

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

/** Which application's engine an @Exclusive call runs under. */
describe('engine registry', () => {
  const registered: Registration[] = [];
  const add = (registration: Registration) => {
    register(registration);
    registered.push(registration);
  };
  afterEach(() => {
    for (const registration of registered.splice(0)) unregister(registration);
  });

  it('injectEngineInto declares one optional property dependency on the EngineRef, once', () => {
    class Service {}
    injectEngineInto(Service);
    injectEngineInto(Service);
    expect(Reflect.getMetadata(PROPERTY_DEPS_METADATA, Service)).toEqual([
      { key: ENGINE_PROPERTY, type: LEASE_ENGINE_REF },
    ]);
    expect(Reflect.getMetadata(OPTIONAL_PROPERTY_DEPS_METADATA, Service)).toEqual([ENGINE_PROPERTY]);
  });

  it('an instance the injector gave an EngineRef runs under that engine', () => {
    const mine = engine('a');
    const instance = { [ENGINE_PROPERTY]: new EngineRef(mine) };
    expect(leaseEngineFor(instance, 'X.m')).toBe(mine);
  });

  it('otherwise: the application that holds the instance, then the one that provides its class, then the only one', () => {
    class A {}
    class B {}
    const a = new A();
    const first = engine('1');
    const second = engine('2');
    add({ leases: first, modules: container(a) });
    add({ leases: second, modules: container(new B()) });
    expect(leaseEngineFor(a, 'A.m')).toBe(first);
    expect(leaseEngineFor(new B(), 'B.m')).toBe(second);
    expect(() => leaseEngineFor({}, 'Plain.m')).toThrow(/none of the 2 Nest applications/);
  });

  it('with no application running, a call names the method and says what to import', () => {
    expect(() => leaseEngineFor({}, 'Lonely.m')).toThrow(LeaseConfigError);
    expect(() => leaseEngineFor({}, 'Lonely.m')).toThrow(/@Exclusive on Lonely\.m: no LeaseService is running/);
  });

  it('a second LeaseModule in one application is refused', () => {
    const modules = container();
    add({ leases: engine('1'), modules });
    expect(() => register({ leases: engine('2'), modules })).toThrow(/imported more than once/);
  });

  it('an EngineRef shows its owner when logged, not the engine', () => {
    expect(inspect(new EngineRef(engine('host:1')))).toBe('[nest-pg-lease: the LeaseService of owner host:1]');
  });
});
