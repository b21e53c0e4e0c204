import { LeaseArgumentError, LeaseKeyError } from '../errors/lease.errors.js';
import { fillKeyTemplate } from '../exclusive/call-plan.js';
import { assertTargetKey, callRequest, keyTemplateOf } from './call-input.js';

describe('target keys', () => {
  test('fills placeholders from the lookup', () => {
    const values: Record<string, unknown> = { id: 42, kind: 'pdf', at: new Date('2026-01-02T03:04:05Z') };
    expect(fillKeyTemplate('report:{kind}:{ id }', (name) => values[name])).toBe('report:pdf:42');
    expect(fillKeyTemplate('day:{at}', (name) => values[name])).toBe('day:2026-01-02T03:04:05.000Z');
  });

  test.each([undefined, null, '', { nested: true }])('a placeholder resolving to %p is a LeaseKeyError', (value) => {
    expect(() => fillKeyTemplate('report:{id}', () => value)).toThrow(LeaseKeyError);
    expect(() => fillKeyTemplate('report:{id}', () => value)).toThrow(/placeholder \{id\} resolved to nothing/);
  });

  test('a filled key is checked once, where every key is (the engine), not by the template filler', () => {
    const long = fillKeyTemplate('{id}', () => 'x'.repeat(300));
    expect(long).toHaveLength(300);
    expect(() => assertTargetKey(long)).toThrow(/at most 255 bytes/);
    expect(() => assertTargetKey(fillKeyTemplate('{id}', () => 'a\0b'))).toThrow(/NUL/);
  });

  test('keys: 1–255 bytes of UTF-8, no NUL, strings only', () => {
    expect(() => assertTargetKey('k'.repeat(255))).not.toThrow();
    expect(() => assertTargetKey('€'.repeat(85))).not.toThrow(); // 255 bytes
    expect(() => assertTargetKey('€'.repeat(86))).toThrow(LeaseKeyError); // 258 bytes
    expect(() => assertTargetKey('')).toThrow(LeaseKeyError);
    expect(() => assertTargetKey(Symbol('k'))).toThrow(LeaseKeyError);
  });

  test('any character but NUL: U+001F too (a semaphore slot is a column of its own, not a suffix of the key)', () => {
    expect(() => assertTargetKey('sem\u001f0')).not.toThrow();
    expect(() => assertTargetKey('\u001f')).not.toThrow();
    // A limited key has the 255 bytes of any key.
    expect(callRequest('k'.repeat(255), { limit: 1000 })).toMatchObject({ limit: 1000 });
    expect(() => callRequest('k'.repeat(256), { limit: 2 })).toThrow(/at most 255 bytes/);
  });

  test('keys must be well-formed UTF-16: a lone surrogate would become U+FFFD and collide with other keys', () => {
    expect(() => assertTargetKey('a\uD800')).toThrow(/lone surrogate/);
    expect(() => assertTargetKey('\uDFFFb')).toThrow(LeaseKeyError);
    expect(() => assertTargetKey('emoji:\uD83D\uDE00')).not.toThrow();
  });
});

describe('key templates (the label of traces and metrics)', () => {
  test("absent: '(none)'; given: itself, 1–255 characters", () => {
    expect(keyTemplateOf(undefined)).toBe('(none)');
    expect(keyTemplateOf('report:{userId}')).toBe('report:{userId}');
    expect(keyTemplateOf('t'.repeat(255))).toHaveLength(255);
  });

  test.each<[unknown, RegExp]>([
    ['', /got a string of 0 characters/],
    ['t'.repeat(256), /got a string of 256 characters/],
    [42, /got number/],
    [null, /got null/],
  ])('%p is a LeaseArgumentError', (value, message) => {
    expect(() => keyTemplateOf(value)).toThrow(LeaseArgumentError);
    expect(() => keyTemplateOf(value)).toThrow(message);
  });
});
