/**
 * The NOTIFY protocol, written and read in one place: the statements (store/sql) write their payloads with the
 * builders below, and the notifier parses them with `parseHeadPayload`. Here, below both, so the database layer
 * never imports the store. Two channels per set of tables:
 *
 * - the head channel (`headChannelOf`): `<waiter id> <target key>` names the one waiter that should attempt now (a
 *   release, a dequeue or a dead waiter's removal moved its line), and `<waiter id>/<fencing token> <target key>`
 *   hands that waiter a grant (direct handoff), which it then only confirms;
 * - a key channel (join results, and the wake-ups of older versions): the payload is the target key alone.
 *
 * A key may contain anything but NUL (spaces, slashes, newlines, U+001F, a text that looks like a payload): the waiter
 * id (a UUID, fixed length) and the token (digits) come first, so the key is whatever follows the first space.
 */

/** The channel of head-only wake-ups of the tables named `tableName`. */
export function headChannelOf(tableName: string): string {
  return `${tableName}_next`;
}

/** What a head-channel payload says: the waiter it names, the key, and the grant a release handed it (if any). */
export interface HeadPayload {
  readonly waiterId: string;
  readonly targetKey: string;
  readonly grant?: bigint;
}

type Field = 'waiterId' | 'grant' | 'targetKey';

/** A payload's parts in order: fixed text, or a field. Both the SQL writers and `formatHeadPayload` follow them. */
type Part = { readonly text: string } | { readonly field: Field };

const WAKE: readonly Part[] = [{ field: 'waiterId' }, { text: ' ' }, { field: 'targetKey' }];
const GRANT: readonly Part[] = [
  { field: 'waiterId' },
  { text: '/' },
  { field: 'grant' },
  { text: ' ' },
  { field: 'targetKey' },
];

/** The SQL text of `parts` over the given SQL expressions: `a::text || '/' || b::text || ' ' || key`. */
function payloadSql(parts: readonly Part[], expressions: Readonly<Partial<Record<Field, string>>>): string {
  return parts
    .map((part) => {
      if ('text' in part) return `'${part.text}'`;
      const expression = expressions[part.field]!;
      // The key is text already; a uuid and a bigint are spelled as text.
      return part.field === 'targetKey' ? expression : `${expression}::text`;
    })
    .join(' || ');
}

/**
 * `pg_notify` of a head-only wake-up on `channel`: `<waiter id> <key>`. Every argument is an SQL expression (a
 * parameter, a column), never a value spliced in.
 */
export function notifyHeadSql(channel: string, waiterId: string, targetKey: string): string {
  return `pg_notify(${channel}, ${payloadSql(WAKE, { waiterId, targetKey })})`;
}

/** `pg_notify` of a grant handed to a waiter (direct handoff) on `channel`: `<waiter id>/<fencing token> <key>`. */
export function notifyGrantSql(channel: string, waiterId: string, fencingToken: string, targetKey: string): string {
  return `pg_notify(${channel}, ${payloadSql(GRANT, { waiterId, grant: fencingToken, targetKey })})`;
}

/** `pg_notify` on a key channel (join results): the payload is the key itself, read as is by the notifier. */
export function notifyKeySql(channel: string, targetKey: string): string {
  return `pg_notify(${channel}, ${targetKey})`;
}

/**
 * The payload the SQL writers produce for `payload`, in TypeScript: used only to pin the format (the round-trip spec
 * and the e2e check of a payload PostgreSQL wrote); the library never sends it.
 */
export function formatHeadPayload(payload: HeadPayload): string {
  const values: Record<Field, string> = {
    waiterId: payload.waiterId,
    grant: String(payload.grant),
    targetKey: payload.targetKey,
  };
  const parts = payload.grant === undefined ? WAKE : GRANT;
  return parts.map((part) => ('text' in part ? part.text : values[part.field])).join('');
}

const HEAD_PAYLOAD = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?:\/([0-9]{1,19}))? (.+)$/s;

/** A head-channel payload (see the module note); undefined for anything else. */
export function parseHeadPayload(payload: string): HeadPayload | undefined {
  const match = HEAD_PAYLOAD.exec(payload);
  if (!match) return undefined;
  const [, waiterId, grant, targetKey] = match;
  return grant === undefined ? { waiterId, targetKey } : { waiterId, targetKey, grant: BigInt(grant) };
}
