/**
 * The bootstrap checks' statements: which objects exist, which rights the role has, whether it may create the
 * objects, whether it may read the system identifier. Pure: SQL text only, every value bound.
 */
import { SEQUENCE_FLOOR } from '../../options/limits.js';
import type { LeaseObjectNames } from './fragments.js';

/**
 * Which lease objects exist: $1 lease table, $2 waiter table, $3 fencing sequence, $4 waiter sequence; and whether
 * each sequence is of the 47-bit token layout (its MINVALUE is `SEQUENCE_FLOOR`; null where it is missing).
 */
export const MISSING_OBJECTS_SQL = `SELECT to_regclass($1) IS NOT NULL AS lease, to_regclass($2) IS NOT NULL AS waiter,
        to_regclass($3) IS NOT NULL AS seq, to_regclass($4) IS NOT NULL AS wseq,
        (SELECT seqmin >= ${SEQUENCE_FLOOR} FROM pg_catalog.pg_sequence WHERE seqrelid = to_regclass($3)) AS seq_layout,
        (SELECT seqmin >= ${SEQUENCE_FLOOR} FROM pg_catalog.pg_sequence WHERE seqrelid = to_regclass($4)) AS wseq_layout`;

/** Whether the role may create the objects: $1 the quoted schema, $2 the schema. */
export const MAY_CREATE_SCHEMA_SQL = `SELECT current_user::text AS role, CASE WHEN to_regnamespace($1) IS NULL
          THEN has_database_privilege(current_database(), 'CREATE')
          ELSE has_schema_privilege($2, 'CREATE') END AS allowed`;

/** Whether the role may call `pg_control_system()` (see `serverHistorySql`). */
export const SYSTEM_ID_READABLE_SQL = `SELECT has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE') AS readable`;

/** One right the library needs at run time: [check function (a constant), object (bound), right (bound), its name]. */
export type PrivilegeCheck = [string, string, string, string];

/** The rights the library needs at run time: USAGE on the schema, rows of both tables, both sequences. */
export function privilegeChecks(n: LeaseObjectNames, schema: string): PrivilegeCheck[] {
  const { lease, waiter, fencingSequence, waiterSequence } = n;
  return [
    ['has_schema_privilege', schema, 'USAGE', `USAGE on schema ${n.schema}`],
    ...['SELECT', 'INSERT', 'UPDATE', 'DELETE'].flatMap((right): PrivilegeCheck[] => [
      ['has_table_privilege', lease, right, `${right} on ${lease}`],
      ['has_table_privilege', waiter, right, `${right} on ${waiter}`],
    ]),
    ['has_sequence_privilege', fencingSequence, 'USAGE', `USAGE on sequence ${fencingSequence}`],
    ['has_sequence_privilege', waiterSequence, 'USAGE', `USAGE on sequence ${waiterSequence}`],
  ];
}

/** The role, and one boolean per check (in order): each check's object and right are bound, two per check. */
export function missingPrivilegesSql(checks: readonly PrivilegeCheck[]): string {
  return `SELECT current_user::text AS role,
        ARRAY[${checks.map(([fn], i) => `${fn}($${2 * i + 1}, $${2 * i + 2})`).join(', ')}] AS granted`;
}
