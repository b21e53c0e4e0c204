import { LeaseConfigError } from '../errors/lease.errors.js';
import { leaseObjectNames, schemaStatements, columnCheckName, grantStatements } from '../schema/lease-schema.js';
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
    // 9: the lease and waiter tables, their sequences and index, the slot_limit column, the token layout, the join
    // result table, and the preemption column (ADD COLUMN IF NOT EXISTS: tables made before them).
    expect(schemaStatements({ schema: 'public', ...names })).toHaveLength(9);
    const custom = schemaStatements({ schema: 'jobs', ...names });
    expect(custom[0]).toBe('CREATE SCHEMA IF NOT EXISTS "jobs"');
    // The token layout is a guarded DO block: a no-op on the sequences the CREATEs just made.
    const layout = custom.filter((statement) => statement.startsWith('DO $layout$'));
    expect(layout).toHaveLength(1);
    expect(custom.filter((statement) => !layout.includes(statement)).every((s) => s.includes('IF NOT EXISTS'))).toBe(
      true,
    );
    expect(custom.filter((statement) => statement.startsWith('CREATE SEQUENCE'))).toEqual([
      'CREATE SEQUENCE IF NOT EXISTS "jobs"."job_lease_fencing_seq" AS bigint MINVALUE 1099511627776',
      'CREATE SEQUENCE IF NOT EXISTS "jobs"."job_lease_waiter_seq" AS bigint MINVALUE 1099511627776',
    ]);
    expect(custom.join('\n')).toContain('WITH (fillfactor = 50)');
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
