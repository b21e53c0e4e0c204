import {
  formatHeadPayload,
  type HeadPayload,
  headChannelOf,
  notifyGrantSql,
  notifyHeadSql,
  notifyKeySql,
  parseHeadPayload,
} from './head-payload.js';

const id = 'abcdef00-0000-4000-8000-00000000000f';

/** An SQL string literal of `text` (quotes doubled). */
const literal = (text: string) => `'${text.replace(/'/g, "''")}'`;

/**
 * Evaluates the payload argument of a `pg_notify(channel, …)` the writers build over string literals: a chain of
 * `'text'` and `'text'::text` joined by `||` — the only SQL the writers produce once their expressions are literals.
 */
function evaluatePayload(sql: string): string {
  const call = /^pg_notify\('[^']*', ([\s\S]*)\)$/.exec(sql);
  if (!call) throw new Error(`not a pg_notify call: ${sql}`);
  let rest = call[1];
  let value = '';
  for (;;) {
    const term = /^'((?:[^']|'')*)'(?:::text)?/.exec(rest);
    if (!term) throw new Error(`unexpected SQL: ${rest}`);
    value += term[1].replace(/''/g, "'");
    rest = rest.slice(term[0].length);
    if (rest === '') return value;
    if (!rest.startsWith(' || ')) throw new Error(`unexpected SQL: ${rest}`);
    rest = rest.slice(4);
  }
}

/** What the SQL writer of `payload` produces, evaluated (its arguments as literals). */
function written(payload: HeadPayload): string {
  const key = literal(payload.targetKey);
  return evaluatePayload(
    payload.grant === undefined
      ? notifyHeadSql("'ch'", literal(payload.waiterId), key)
      : notifyGrantSql("'ch'", literal(payload.waiterId), literal(String(payload.grant)), key),
  );
}

describe('head-only NOTIFY payloads', () => {
  it('the SQL writers spell the columns they are given, as text', () => {
    expect(notifyHeadSql('$3', 'h.waiter_id', 'h.target_id')).toBe(
      "pg_notify($3, h.waiter_id::text || ' ' || h.target_id)",
    );
    expect(notifyGrantSql('$2', 'x.waiter_id', 'x.fencing_token', 'x.target_id')).toBe(
      "pg_notify($2, x.waiter_id::text || '/' || x.fencing_token::text || ' ' || x.target_id)",
    );
    expect(notifyKeySql('$5', '$1')).toBe('pg_notify($5, $1)');
  });

  const keys = [
    'report:1',
    'a b\nc',
    '/12 k',
    'tenant/7/export',
    'clé 🔑 ключ',
    '\u001f',
    'sem\u001f0',
    `${id} k`,
    `${id}/12 k`,
    ' leading and trailing ',
  ];

  it.each(keys)('round trip of the wake-up and the grant, key %p', (targetKey) => {
    for (const payload of [
      { waiterId: id, targetKey },
      { waiterId: id, targetKey, grant: 141836999983106n },
      { waiterId: id, targetKey, grant: 9223372036854775807n },
    ] as HeadPayload[]) {
      const text = formatHeadPayload(payload);
      // The SQL writer and its TypeScript twin agree, and the parser gives back what was written.
      expect(written(payload)).toBe(text);
      expect(parseHeadPayload(text)).toEqual(payload);
    }
  });

  it('parses `<waiter id> <key>`, keys with spaces and newlines included', () => {
    expect(parseHeadPayload(`${id} report:1`)).toEqual({ waiterId: id, targetKey: 'report:1' });
    expect(parseHeadPayload(`${id} a b\nc`)).toEqual({ waiterId: id, targetKey: 'a b\nc' });
  });

  it('parses a grant `<waiter id>/<fencing token> <key>`; a key that looks like one stays a key', () => {
    expect(parseHeadPayload(`${id}/141836999983106 report:1`)).toEqual({
      waiterId: id,
      targetKey: 'report:1',
      grant: 141836999983106n,
    });
    expect(parseHeadPayload(`${id} /12 k`)).toEqual({ waiterId: id, targetKey: '/12 k' });
  });

  it.each(['report:1', `${id}`, `${id}/ k`, `${id}/12k`, `${id.toUpperCase()} k`, ` ${id} k`, `${id} `, ''])(
    'ignores %p',
    (payload) => {
      expect(parseHeadPayload(payload)).toBeUndefined();
    },
  );

  it('the head channel is named after the lease table', () => {
    expect(headChannelOf('job_lease')).toBe('job_lease_next');
  });
});
