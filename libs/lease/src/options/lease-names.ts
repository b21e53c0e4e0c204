/**
 * The names a deployment chooses for its lease objects, validated: PostgreSQL identifiers, with room for the derived
 * objects' suffixes and no clash between them. All the migrations and entities need (schema/ imports them from here).
 */
import { LeaseConfigError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';

/** The names a deployment chooses (validated by `resolveLeaseNames`). */
export interface LeaseNames {
  schema: string;
  tableName: string;
  waiterTableName: string;
}

const IDENTIFIER_MAX_BYTES = 63;
/** Suffixes appended to the table names for derived objects; the longest decides the room left for the name. */
const DERIVED_SUFFIXES = ['_fencing_seq', '_seq', '_wake', '_order_idx'];
const LONGEST_SUFFIX = Math.max(...DERIVED_SUFFIXES.map((suffix) => suffix.length));

/** Checks a schema or table name: PostgreSQL identifiers are at most 63 bytes and cannot contain NUL. */
export function checkIdentifier(name: string, value: unknown, room = IDENTIFIER_MAX_BYTES): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw new LeaseConfigError(messages.identifierEmpty(name, JSON.stringify(value)));
  }
  if (value.includes('\0')) {
    throw new LeaseConfigError(messages.identifierNul(name));
  }
  const bytes = Buffer.byteLength(value, 'utf8');
  if (bytes > room) {
    throw new LeaseConfigError(messages.identifierTooLong(name, value, bytes, room, IDENTIFIER_MAX_BYTES));
  }
  return value;
}

/**
 * The lease objects share one namespace per schema (tables, sequences, indexes): a table named like a derived object
 * (`waiterTableName: 'jl_fencing_seq'` with `tableName: 'jl'`) would fail later with a raw error.
 */
function checkDerivedNames(table: string, waiterTable: string): void {
  const objects: Array<[string, string]> = [
    [table, `tableName "${table}"`],
    [waiterTable, `waiterTableName "${waiterTable}"`],
    [`${table}_fencing_seq`, `the fencing sequence of tableName "${table}"`],
    [`${table}_pkey`, `the primary key index of tableName "${table}"`],
    [`${waiterTable}_seq`, `the waiter sequence of waiterTableName "${waiterTable}"`],
    [`${waiterTable}_order_idx`, `the order index of waiterTableName "${waiterTable}"`],
    [`${waiterTable}_pkey`, `the primary key index of waiterTableName "${waiterTable}"`],
    [`${table}_result`, `the join result table of tableName "${table}"`],
    [`${table}_result_pkey`, `the primary key index of the join result table of tableName "${table}"`],
  ];
  for (const [i, [name, what]] of objects.entries()) {
    const clash = objects.findIndex(([other], j) => j !== i && other === name);
    if (clash >= 0 && clash < i) {
      throw new LeaseConfigError(messages.derivedNamesCollide(objects[clash][1], what, name));
    }
  }
}

/**
 * The schema and table names with their defaults, validated (and their derived objects' names checked for clashes):
 * all the migrations and entities need — no owner identity, no timing options.
 */
export function resolveLeaseNames(names: Partial<LeaseNames> = {}): LeaseNames {
  if (typeof names !== 'object' || names === null) {
    throw new LeaseConfigError(messages.namesNotObject());
  }
  const room = IDENTIFIER_MAX_BYTES - LONGEST_SUFFIX;
  const tableName = checkIdentifier('tableName', names.tableName ?? 'job_lease', room);
  const waiterTableName = checkIdentifier('waiterTableName', names.waiterTableName ?? 'job_lease_waiter', room);
  if (tableName === waiterTableName) {
    throw new LeaseConfigError(messages.tableNamesEqual(tableName));
  }
  checkDerivedNames(tableName, waiterTableName);
  return { schema: checkIdentifier('schema', names.schema ?? 'public'), tableName, waiterTableName };
}
