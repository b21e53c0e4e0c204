import 'reflect-metadata';
import { jest } from '@jest/globals';
import { Body, Controller, Param, Post, SetMetadata } from '@nestjs/common';
import { MetadataScanner, type ModulesContainer } from '@nestjs/core';
import { LeaseBusyError, LeaseConfigError, LeaseKeyError } from '../errors/lease.errors.js';
import { EXCLUSIVE_METADATA } from '../lease.internal-constants.js';
import type { LeaseEngine } from '../engine/lease-engine.js';
import { ExclusiveExplorer } from './exclusive.explorer.js';
import { EngineRef } from './engine-registry.js';
import { Exclusive } from './exclusive.decorator.js';
import type { LeaseCall } from '../options/busy-policy.js';

/**
 * The method wrapper `@Exclusive` puts in place at decoration time, and the keys it computes. The engine is a stand-in
 * recording what it is asked (this tests the wrapper, not leases: those are tested against PostgreSQL in test/).
 */
describe('@Exclusive', () => {
  const entered: Array<{ key: string; call: unknown }> = [];
  let busy = false;
  const engine = {
    enter: jest.fn(async (call: LeaseCall) => {
      const key = call.request.targetKey;
      if (busy) throw new LeaseBusyError(key, 1_000);
      entered.push({ key, call });
      return { lease: { targetKey: key }, exit: () => Promise.resolve() };
    }),
    within: (_lease: unknown, work: () => unknown) => work(),
  } as unknown as LeaseEngine;
  let explorer: ExclusiveExplorer;

  beforeAll(() => {
    // Registers the stand-in as the running application's engine, as the real explorer does at bootstrap.
    explorer = new ExclusiveExplorer(
      new Map() as unknown as ModulesContainer,
      new MetadataScanner(),
      new EngineRef(engine),
    );
  });
  afterAll(() => explorer.onApplicationShutdown());
  beforeEach(() => {
    entered.length = 0;
    busy = false;
  });

  const MARK = 'test:mark';

  class Reports {
    readonly prefix = 'from this';

    @Exclusive('report:{id}', { priority: 3, holdAtLeastMs: 10, onBusy: 'wait' })
    @SetMetadata(MARK, 'applied before')
    async build(input: { id: number }, extra?: string): Promise<string> {
      return `${this.prefix}: ${input.id}${extra ?? ''}`;
    }

    @Exclusive('second:{1}')
    async positional(_a: string, b: string): Promise<string> {
      return b;
    }

    @Exclusive((input: { tenant: string }) => `tenant:${input.tenant}`, { onBusy: 'skip' })
    async skipping(input: { tenant: string }): Promise<string> {
      return input.tenant;
    }
  }

  it('keeps the name, the length and the metadata of decorators applied before it', () => {
    const method = Reports.prototype.build;
    expect(method.name).toBe('build');
    expect(method.length).toBe(2);
    expect(Reflect.getMetadata(MARK, method)).toBe('applied before');
    expect(Reflect.getMetadata(EXCLUSIVE_METADATA, method)).toEqual({
      targetKey: 'report:{id}',
      priority: 3,
      holdMs: 10,
      limit: 1,
      busy: { kind: 'wait' },
      sticky: false,
    });
  });

  it('runs the original with its `this` and arguments, under the key filled from the first argument', async () => {
    await expect(new Reports().build({ id: 7 }, '!')).resolves.toBe('from this: 7!');
    expect(entered).toEqual([
      {
        key: 'report:7',
        call: {
          request: { targetKey: 'report:7', priority: 3, holdMs: 10, keyTemplate: 'report:{id}', limit: 1 },
          busy: { kind: 'wait' },
        },
      },
    ]);
  });

  it('works for a method captured early and called detached with another `this`', async () => {
    const captured = Reports.prototype.build;
    await expect(captured.call({ prefix: 'other' }, { id: 1 })).resolves.toBe('other: 1');
  });

  it('{1} is the second argument; a function key receives the arguments', async () => {
    await new Reports().positional('a', 'b');
    await new Reports().skipping({ tenant: 'acme' });
    expect(entered.map((entry) => entry.key)).toEqual(['second:b', 'tenant:acme']);
  });

  it("onBusy: 'skip' resolves undefined without running the method; otherwise LeaseBusyError", async () => {
    busy = true;
    await expect(new Reports().skipping({ tenant: 'acme' })).resolves.toBeUndefined();
    await expect(new Reports().build({ id: 1 })).rejects.toBeInstanceOf(LeaseBusyError);
  });

  it('a placeholder resolving to nothing is a LeaseKeyError, before any acquisition', async () => {
    await expect(new Reports().build({} as never)).rejects.toBeInstanceOf(LeaseKeyError);
    expect(entered).toEqual([]);
  });

  it('controller handlers read {id} from the parameter a decorator names, after pipes', async () => {
    @Controller('r')
    class ReportController {
      @Post(':id')
      @Exclusive('report:{id}:{kind}')
      async build(@Body() _body: { kind: string }, @Param('id') id: number): Promise<number> {
        return id;
      }
    }
    await expect(new ReportController().build({ kind: 'pdf' }, 42)).resolves.toBe(42);
    expect(entered.map((entry) => entry.key)).toEqual(['report:42:pdf']);
  });

  it.each<[string, () => unknown]>([
    ['an empty key', () => Exclusive('')],
    ['a fractional priority', () => Exclusive('k', 1.5)],
    ['a negative wait', () => Exclusive('k', { onBusy: { wait: { timeoutMs: -1 } } })],
    ['a flag of the old shape', () => Exclusive('k', { waitTimeoutMs: 5 } as never)],
    ['an unknown onBusy', () => Exclusive('k', { onBusy: 'ignore' as never })],
  ])('%s is a LeaseConfigError at decoration time', (_, decorate) => {
    expect(decorate).toThrow(LeaseConfigError);
  });

  it.each<[string, string]>([
    ['a template longer than any key', `${'x'.repeat(256)}`],
    ['a template whose fixed part leaves no room for its placeholders', `${'x'.repeat(254)}:{id}`],
    ['a template with a NUL', 'report:\0:{id}'],
    ['a template with a lone surrogate', 'report:\uD800:{id}'],
  ])('%s is a LeaseConfigError naming the method, at decoration time', (_, template) => {
    const decorate = () => {
      class Provider {
        @Exclusive(template)
        async work(): Promise<void> {}
      }
      return Provider;
    };
    expect(decorate).toThrow(LeaseConfigError);
    expect(decorate).toThrow(/@Exclusive on Provider\.work/);
  });
});
