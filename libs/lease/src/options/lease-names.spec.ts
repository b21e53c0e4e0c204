import { LeaseConfigError } from '../errors/lease.errors.js';
import {
  baseSchemaStatements,
  columnCheckName,
  grantStatements,
  leaseObjectNames,
  schemaStatements,
} from '../schema/lease-schema.js';
import { checkIdentifier, resolveLeaseNames } from './lease-names.js';

/** Schema names: validation, the derived objects, the DDL they make. */
describe('lease names and the schema they make', () => {
  it('an identifier is a non-empty string of at most 63 bytes (or the room given) without NUL', () => {
    expect(checkIdentifier('schema', 's'.repeat(63))).toBe('s'.repeat(63));
    expect(() => checkIdentifier('schema', 's'.repeat(64))).toThrow(LeaseConfigError);
    expect(() => checkIdentifier('tableName', 'é'.repeat(26), 51)).toThrow(/52 bytes; at most 51 fit/);
    expect(() => checkIdentifier('tableName', 7)).toThrow(/non-empty string, got 7/);
  });

  it('a table name leaves room for its longest derived suffix (_fencing_seq)', () => {
    expect(resolveLeaseNames({ tableName: 't'.repeat(51) }).tableName).toHaveLength(51);
    expect(() => resolveLeaseNames({ tableName: 't'.repeat(52) })).toThrow(/at most 51 fit/);
  });

  it('names that collide with each other’s derived objects are refused', () => {
    expect(() => resolveLeaseNames({ tableName: 'a', waiterTableName: 'a_pkey' })).toThrow(/collides with/);
    expect(() => resolveLeaseNames({ tableName: 'b_seq', waiterTableName: 'b' })).toThrow(/collides with/);
    expect(() => resolveLeaseNames(null as never)).toThrow(/must be an object/);
  });

  it('derived names: sequences qualified and quoted, the order index unqualified, the channel plain', () => {
    expect(leaseObjectNames({ schema: 'S', tableName: 't', waiterTableName: 'w' })).toEqual({
      schema: '"S"',
      lease: '"S"."t"',
      waiter: '"S"."w"',
      fencingSequence: '"S"."t_fencing_seq"',
      waiterSequence: '"S"."w_seq"',
      waiterOrderIndex: '"w_order_idx"',
      result: '"S"."t_result"',
      resultChannel: 't_joined',
      channel: 't_wake',
      audit: '"S"."t_audit"',
      drain: '"S"."t_drain"',
      journal: '"S"."t_journal"',
      journalKeyIndex: '"t_jk_idx"',
      journalAtIndex: '"t_jat_idx"',
    });
  });

  it('the DDL creates the schema only when it is not public, everything IF NOT EXISTS, then the token layout', () => {
    const names = { tableName: 'job_lease', waiterTableName: 'job_lease_waiter' };
    // 10: the lease and waiter tables, their sequences and index, the slot_limit column, the token layout, the join
    // result table, the preemption column (ADD COLUMN IF NOT EXISTS: tables made before them), and the slot column.
    expect(schemaStatements({ schema: 'public', ...names })).toHaveLength(10);
    const custom = schemaStatements({ schema: 'jobs', ...names });
    expect(custom[0]).toBe('CREATE SCHEMA IF NOT EXISTS "jobs"');
    // The token layout and the slot column are guarded DO blocks: no-ops on the objects the CREATEs just made.
    const guarded = custom.filter((statement) => /^DO \$(layout|slots)\$/.test(statement));
    expect(guarded).toHaveLength(2);
    expect(custom.filter((statement) => !guarded.includes(statement)).every((s) => s.includes('IF NOT EXISTS'))).toBe(
      true,
    );
    expect(custom.filter((statement) => statement.startsWith('CREATE SEQUENCE'))).toEqual([
      'CREATE SEQUENCE IF NOT EXISTS "jobs"."job_lease_fencing_seq" AS bigint MINVALUE 1099511627776',
      'CREATE SEQUENCE IF NOT EXISTS "jobs"."job_lease_waiter_seq" AS bigint MINVALUE 1099511627776',
    ]);
    expect(custom.join('\n')).toContain('WITH (fillfactor = 50)');
  });

  it('createSchema makes the lease table keyed by (target_id, slot); the first migration keeps the table from before the slot column', () => {
    const names = { schema: 'public', tableName: 'job_lease', waiterTableName: 'job_lease_waiter' };
    const lease = (statements: string[]) =>
      statements.find((statement) => statement.startsWith('CREATE TABLE IF NOT EXISTS "public"."job_lease" ('))!;
    const latest = lease(schemaStatements(names));
    expect(latest).toContain('target_id text NOT NULL CONSTRAINT "job_lease_target_id_check"');
    expect(latest).toMatch(
      /preempt_of uuid,\s+slot integer NOT NULL DEFAULT 0,\s+PRIMARY KEY \(target_id, slot\)\s+\)/,
    );
    const first = lease(baseSchemaStatements(names));
    expect(first).toContain('target_id text PRIMARY KEY CONSTRAINT "job_lease_target_id_check"');
    expect(first).not.toContain('slot integer');
  });

  it('CHECK constraint names follow PostgreSQL’s truncation, the longer part first', () => {
    expect(columnCheckName('job_lease', 'hold_ms')).toBe('job_lease_hold_ms_check');
    const long = columnCheckName('t'.repeat(60), 'lease_timeout_ms');
    expect(Buffer.byteLength(long)).toBeLessThanOrEqual(63);
    expect(long.endsWith('_lease_timeout_ms_check')).toBe(true);
  });

  it('the GRANTs quote the role', () => {
    const grants = grantStatements({ schema: 'public', tableName: 'l', waiterTableName: 'w' }, 'app "role"');
    expect(grants[0]).toBe('GRANT USAGE ON SCHEMA "public" TO "app ""role"""');
    expect(grants).toHaveLength(4);
    expect(grants[3]).toBe(
      'GRANT SELECT, INSERT, DELETE ON "public"."l_audit", "public"."l_drain", "public"."l_journal" TO "app ""role"""',
    );
  });
});
