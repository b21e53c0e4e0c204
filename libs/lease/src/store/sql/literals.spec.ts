import { resolveLeaseOptions } from '../../options/resolve-lease-options.js';
import { buildStatements } from '../statement-texts.js';
import { inlineParameters, literal } from './literals.js';

/** Parameters written as literals (the fenced transaction's messages): quoting, and what is left untouched. */
describe('literals', () => {
  it.each([
    [null, 'NULL'],
    [undefined, 'NULL'],
    ['plain', `'plain'`],
    [`o'brien`, `'o''brien'`],
    ['back\\slash', `E'back\\\\slash'`],
    [`both\\'`, `E'both\\\\'''`],
    ['line\n-- comment', `'line\n-- comment'`],
    [42, `'42'`],
    [1.5, `'1.5'`],
    [12345678901234567890n, `'12345678901234567890'`],
    [false, `'false'`],
  ])('literal(%p) is %s', (value, expected) => {
    expect(literal(value)).toBe(expected);
  });

  it('refuses what cannot be written as a literal', () => {
    expect(() => literal('a\0b')).toThrow(TypeError);
    expect(() => literal(Number.NaN)).toThrow(TypeError);
  });

  it('replaces the parameters, $10 as one, and leaves strings, identifiers, dollar quotes and comments alone', () => {
    const text = [
      `SELECT $1, $10, $2::bigint, '$1' AS s, "a$1" AS i, x$1, $$ $1 $$, $f$ $2 $f$`,
      `-- $1 in a comment`,
      `/* $1 /* nested $2 */ still $1 */ FROM t WHERE c = $3`,
    ].join('\n');
    const values = ['one', 'two', null, 4, 5, 6, 7, 8, 9, 'ten'];
    expect(inlineParameters(text, values)).toBe(
      [
        `SELECT 'one', 'ten', 'two'::bigint, '$1' AS s, "a$1" AS i, x$1, $$ $1 $$, $f$ $2 $f$`,
        `-- $1 in a comment`,
        `/* $1 /* nested $2 */ still $1 */ FROM t WHERE c = NULL`,
      ].join('\n'),
    );
  });

  it('a value cannot leave its literal: quotes and newlines stay inside it', () => {
    const inlined = inlineParameters('SELECT $1 -- the key', [`x'; DROP TABLE t; --\n`]);
    expect(inlined).toBe(`SELECT 'x''; DROP TABLE t; --\n' -- the key`);
  });

  it('a parameter without its value, or an unterminated token: an error, not a statement', () => {
    expect(() => inlineParameters('SELECT $2', ['one'])).toThrow(RangeError);
    expect(() => inlineParameters('SELECT $0', ['one'])).toThrow(RangeError);
    expect(() => inlineParameters(`SELECT 'open`, [])).toThrow(SyntaxError);
    expect(() => inlineParameters('SELECT /* open', [])).toThrow(SyntaxError);
    expect(() => inlineParameters('SELECT $q$ open', [])).toThrow(SyntaxError);
  });

  it.each([
    ['default names', resolveLeaseOptions({ owner: 'o' })],
    [
      'custom names that need quoting',
      resolveLeaseOptions({ owner: 'o', tables: { schema: 'S $1', tableName: `t'$2` } }),
    ],
  ])('the fenced statements with %s: every parameter replaced, nothing else changed', (_, options) => {
    const { sql } = buildStatements(options);
    for (const text of [sql.lockForFence, sql.release, sql.semaphoreRelease]) {
      const values = Array.from({ length: 7 }, (_, i) => `v${i + 1}`);
      const inlined = inlineParameters(text, values);
      // Outside literals, no parameter is left; the text between them is the statement's own.
      expect(inlined.replace(/'v\d'|"(?:[^"]|"")*"/g, '')).not.toMatch(/\$\d/);
      expect(inlined.replace(/'v(\d)'/g, '$$$1')).toBe(text);
    }
  });
});
