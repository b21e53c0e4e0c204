/**
 * A statement's parameters written into its text as quoted literals. Used only where a statement must travel in one
 * simple-query message with others — the fenced transaction's lock with its BEGIN, its release with its COMMIT — where
 * the protocol binds no parameters. Every value becomes what `pg` would have sent as an untyped text parameter, quoted:
 * PostgreSQL types an untyped literal as it types an untyped parameter, from its context (`$5::bigint`, `l.slot = $7`).
 */

/** A value a statement of the library binds: what `pg` sends as text. */
export type LiteralValue = string | number | bigint | boolean | null | undefined;

/**
 * `value` as a SQL literal: `NULL`, or the text quoted, `'` doubled, and (with the `E` prefix) `\` doubled, so it
 * reads the same whatever `standard_conforming_strings` is. A NUL character cannot be sent in a query text at all.
 */
export function literal(value: LiteralValue): string {
  if (value === null || value === undefined) return 'NULL';
  if (typeof value === 'number' && !Number.isFinite(value)) throw new TypeError(`not a finite number: ${value}`);
  const text = String(value);
  if (text.includes('\0')) throw new TypeError('a value with a NUL character cannot be sent as a literal');
  const quoted = `'${text.replace(/'/g, "''").replace(/\\/g, '\\\\')}'`;
  return text.includes('\\') ? `E${quoted}` : quoted;
}

/** Identifier characters: a `$` right after one is part of the identifier, not a parameter. */
const IDENTIFIER_CHAR = /[A-Za-z0-9_$\u0080-\uffff]/;
const PARAMETER = /\$(\d+)/y;
const DOLLAR_QUOTE = /\$([A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/y;

/** A statement text cut at its parameters: the text between them, and each one's index in the values. */
interface Template {
  readonly parts: readonly string[];
  readonly parameters: readonly number[];
}

/** The templates of the texts seen (the library's few statement texts; bounded all the same). */
const templates = new Map<string, Template>();
const MAX_TEMPLATES = 64;

/**
 * `text` with each parameter `$n` replaced by `literal(values[n - 1])`. Only parameters of the statement are replaced:
 * quoted strings, quoted identifiers (a custom table name), dollar-quoted bodies and comments are copied as they are
 * (a value written into a `--` comment could end the comment with a newline). Every `$n` needs a value. The text is
 * cut at its parameters once (`templates`): each call only joins.
 */
export function inlineParameters(text: string, values: readonly LiteralValue[]): string {
  let template = templates.get(text);
  if (!template) {
    template = cut(text);
    if (templates.size < MAX_TEMPLATES) templates.set(text, template);
  }
  const { parts, parameters } = template;
  let out = parts[0];
  for (let i = 0; i < parameters.length; i++) {
    const index = parameters[i];
    if (index >= values.length) throw new RangeError(`no value for $${index + 1}`);
    out += literal(values[index]) + parts[i + 1];
  }
  return out;
}

function cut(text: string): Template {
  const parts: string[] = [];
  const parameters: number[] = [];
  let part = '';
  let at = 0;
  while (at < text.length) {
    const end = tokenEnd(text, at);
    if (end < 0) {
      PARAMETER.lastIndex = at;
      const [whole, number] = PARAMETER.exec(text)!;
      if (Number(number) < 1) throw new RangeError(`no value for $${number}`);
      parts.push(part);
      parameters.push(Number(number) - 1);
      part = '';
      at += whole.length;
    } else {
      part += text.slice(at, end);
      at = end;
    }
  }
  parts.push(part);
  return { parts, parameters };
}

/** Where the token starting at `at` ends (copied as it is), or -1 when a parameter starts there. */
function tokenEnd(text: string, at: number): number {
  const first = text[at];
  const pair = text.slice(at, at + 2);
  if (first === "'" || first === '"') return quotedEnd(text, at, first);
  if (pair === '--') return lineEnd(text, at);
  if (pair === '/*') return blockCommentEnd(text, at);
  if (first === '$') {
    if (at > 0 && IDENTIFIER_CHAR.test(text[at - 1])) return at + 1;
    PARAMETER.lastIndex = at;
    if (PARAMETER.test(text)) return -1;
    DOLLAR_QUOTE.lastIndex = at;
    const tag = DOLLAR_QUOTE.exec(text)?.[0];
    if (tag) return closingAfter(text, at + tag.length, tag);
  }
  return at + 1;
}

/** The end of a `'…'` or `"…"` token (its quote doubled inside it). */
function quotedEnd(text: string, at: number, quote: string): number {
  let index = at + 1;
  for (;;) {
    const next = text.indexOf(quote, index);
    if (next < 0) throw new SyntaxError(`unterminated ${quote} in a statement`);
    if (text[next + 1] !== quote) return next + 1;
    index = next + 2;
  }
}

function lineEnd(text: string, at: number): number {
  const next = text.indexOf('\n', at);
  return next < 0 ? text.length : next;
}

/** The end of a `/* … *\/` comment, nested ones included (as PostgreSQL reads them). */
function blockCommentEnd(text: string, at: number): number {
  let depth = 0;
  let index = at;
  while (index < text.length) {
    const pair = text.slice(index, index + 2);
    if (pair === '/*') {
      depth++;
      index += 2;
    } else if (pair === '*/') {
      depth--;
      index += 2;
      if (depth === 0) return index;
    } else {
      index++;
    }
  }
  throw new SyntaxError('unterminated /* in a statement');
}

function closingAfter(text: string, from: number, tag: string): number {
  const next = text.indexOf(tag, from);
  if (next < 0) throw new SyntaxError(`unterminated ${tag} in a statement`);
  return next + tag.length;
}
