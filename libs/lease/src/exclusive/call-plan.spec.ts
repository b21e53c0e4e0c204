import 'reflect-metadata';
import { Body, Param } from '@nestjs/common';
import { LeaseConfigError, LeaseKeyError } from '../errors/lease.errors.js';
import { exclusiveDeclaration } from '../options/busy-policy.js';
import type { ArgumentPlan } from './argument-plan.js';
import { CallPlan, fillKeyTemplate, MethodPlans } from './call-plan.js';

/** A provider method's plan: `{name}` reads a field of the first argument, `{0}` an argument by position. */
const providerPlan: ArgumentPlan = {
  door: 'provider',
  label: 'Jobs.run',
  named: new Map(),
  wholes: [{ index: 0, label: 'the first argument' }],
  positions: 'any',
  leaseSlots: [],
};
const planOf = (template: string, options?: Parameters<typeof exclusiveDeclaration>[1]) =>
  new CallPlan(exclusiveDeclaration(template, options), providerPlan);

/** The static part of a decorated call, built once; per call only the key. */
describe('CallPlan', () => {
  it.each([
    ['fixed', [{}]],
    ['report:{id}', [{ id: 7 }]],
    ['{id}', [{ id: 'a' }]],
    ['{a}{b}', [{ a: 1, b: 2 }]],
    ['x:{ a }:y:{b}:z', [{ a: 'p', b: 'q' }]],
    ['{order.id}-{0.order.id}', [{ order: { id: 5 } }]],
    ['day:{at}', [{ at: new Date(Date.UTC(2026, 0, 2)) }]],
    ['{1}/{0}', ['first', 'second']],
  ])('the key of %s is the one fillKeyTemplate makes', (template, args) => {
    const plan = planOf(template);
    const expected = fillKeyTemplate(template, (name) => {
      const [head, ...path] = name.split('.');
      let value: unknown = /^\d+$/.test(head) ? args[Number(head)] : (args[0] as Record<string, unknown>)[head];
      for (const part of path) value = (value as Record<string, unknown>)[part];
      return value;
    });
    expect(plan.keyOf(args)).toBe(expected);
  });

  it('a placeholder resolving to nothing is a LeaseKeyError naming it', () => {
    expect(() => planOf('report:{kind}:{id}').keyOf([{ kind: 'pdf', id: '' }])).toThrow(LeaseKeyError);
    expect(() => planOf('report:{kind}:{id}').keyOf([{ kind: 'pdf' }])).toThrow(
      /placeholder \{id\} resolved to nothing/,
    );
  });

  it("one call's request: the declaration's values, the template, the key checked", () => {
    const plan = planOf('report:{id}', { priority: 3, holdAtLeastMs: 10, onBusy: 'wait' });
    const signal = new AbortController().signal;
    expect(plan.call('report:7', signal)).toEqual({
      request: { targetKey: 'report:7', priority: 3, holdMs: 10, keyTemplate: 'report:{id}', limit: 1 },
      busy: { kind: 'wait' },
      signal,
    });
    expect(() => plan.call('a\0b')).toThrow(/NUL/);
  });

  it('built once per class: a subclass that inherits the method has its own (its label, its parameters)', () => {
    class Reports {
      build(@Param('id') id: string, @Body() body: unknown): unknown {
        return [id, body];
      }
    }
    class MoreReports extends Reports {}
    const wrapped = () => Reports.prototype.build;
    const plans = new MethodPlans(exclusiveDeclaration('report:{id}'), 'build', wrapped);
    expect(plans.of(Reports)).toBe(plans.of(Reports));
    expect(plans.of(MoreReports)).not.toBe(plans.of(Reports));
    expect(plans.of(MoreReports).label).toBe('MoreReports.build');
  });

  it('a placeholder the signature cannot fill is a LeaseConfigError when the plan is built', () => {
    function handler() {}
    Reflect.defineMetadata('method', 0, handler);
    Reflect.defineMetadata('path', '/', handler);
    class Api {}
    const plans = new MethodPlans(exclusiveDeclaration('r:{id}:{missing}'), 'build', () => handler);
    expect(() => plans.of(Api)).toThrow(LeaseConfigError);
  });
});
