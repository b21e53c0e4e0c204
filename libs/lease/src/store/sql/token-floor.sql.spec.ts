import { resolveLeaseOptions } from '../../options/resolve-lease-options.js';
import { leaseObjectNames } from '../../schema/lease-schema.js';
import { buildStatements } from '../statement-texts.js';
import { historyToken } from './fencing-token.js';
import { purgeSql } from './purge.sql.js';
import {
  HIGH_WATER_KEY,
  HIGH_WATER_SLOT,
  highWaterToken,
  ownerRaiseSql,
  RAISE_MARGIN,
  raiseHighWaterSql,
  raiseSequencesSql,
} from './token-floor.sql.js';

/** The builders that keep tokens rising where the sequences stand below the tables (issue 42 item 2). */
const defaults = resolveLeaseOptions({ owner: 'o' });
const custom = resolveLeaseOptions({
  tables: { schema: 'Ops "x"', tableName: `it's`, waiterTableName: 'Line' },
  owner: 'o',
});
const count = (text: string, part: string) => text.split(part).length - 1;

describe('token floors', () => {
  it('a floored token is the larger of the drawn one and the floor + 1, NULL where the floor has no successor', () => {
    const floored = historyToken('x.v', 'l.fencing_token');
    expect(floored).toContain('greatest((h.timeline << 47) | x.v, l.fencing_token + 1)');
    // A NULL floor (no row, nothing purged) leaves the drawn token; a floor at the last of its 47 bits gives NULL.
    expect(floored).toContain('coalesce(l.fencing_token, 0) & 140737488355327 < 140737488355327');
    expect(floored).toMatch(/^CASE WHEN x\.v BETWEEN 0 AND 140737488355327 AND h\.timeline < 65536/);
    expect(historyToken('x.v')).not.toContain('greatest');
  });

  it('every statement that draws from the fencing sequence floors what it draws; waiter places are not floored', () => {
    const { sql, names } = buildStatements(defaults);
    const draw = `nextval('"public"."job_lease_fencing_seq"')`;
    const drawing = Object.entries(sql).filter(([, text]) => text.includes(draw));
    expect(drawing.map(([key]) => key).sort()).toEqual(
      [
        'acquire',
        'acquireLone',
        'acquireOrQueue',
        'batchAcquire',
        'batchRelease',
        'dequeue',
        'dequeueAll',
        'exclusiveAcquire',
        'preemptTake',
        'release',
        'releaseAndPark',
        'semaphoreAcquire',
        'semaphoreBatchAcquire',
        'sharedAcquire',
      ].sort(),
    );
    for (const [key, text] of drawing) {
      expect({ key, floored: count(text, 'greatest((h.timeline << 47)') }).toEqual({ key, floored: count(text, draw) });
    }
    // A key's first row (an INSERT) is floored at the high-water mark; an existing row at its own token.
    expect(count(sql.acquireLone, highWaterToken(names.lease))).toBe(2);
    expect(sql.acquireLone).toContain('l.fencing_token + 1');
    expect(sql.enqueue).not.toContain('greatest((h.timeline << 47)');
    // The parked place of a release is a waiter place: one floored draw (the grant's), the place's not floored.
    expect(count(sql.releaseAndPark, 'greatest((h.timeline << 47)')).toBe(1);
  });

  it('the high-water mark is one primary-key probe of the row of the one slot no key has (-1)', () => {
    const n = leaseObjectNames(custom);
    expect([HIGH_WATER_KEY, HIGH_WATER_SLOT]).toEqual(['chr(31)', -1]);
    expect(highWaterToken(n.lease)).toBe(
      `(SELECT hw.fencing_token FROM "Ops ""x"""."it's" hw WHERE hw.target_id = chr(31) AND hw.slot = -1)`,
    );
  });

  it('the purge raises the mark in the statement that deletes, never deletes it, and only when it deleted', () => {
    const n = leaseObjectNames(defaults);
    const purge = purgeSql(n);
    expect(count(purge, 'l.slot >= 0')).toBe(2); // the lock step and the delete's re-check
    expect(purge).toContain(raiseHighWaterSql(n.lease, '$3::bigint', 'EXISTS (SELECT 1 FROM gone)'));
    expect(raiseHighWaterSql(n.lease, '$3::bigint', 'true')).toContain(
      'ON CONFLICT (target_id, slot) DO UPDATE SET fencing_token = greatest(l.fencing_token, EXCLUDED.fencing_token)',
    );
    expect(raiseHighWaterSql(n.lease, '$3::bigint', 'true')).toContain('SELECT chr(31), -1, NULL, $3::bigint');
  });

  it('the raise: $1 timeline, $2 top token, $3 top place; read under an advisory lock; setval only where allowed', () => {
    const text = raiseSequencesSql(leaseObjectNames(custom));
    expect(new Set([...text.matchAll(/\$(\d+)/g)].map((m) => m[1]))).toEqual(new Set(['1', '2', '3']));
    expect(text).toContain(`pg_advisory_xact_lock(hashtext('"Ops ""x"""."it''s_fencing_seq"'), hashtext('raise'))`);
    expect(text).toContain(`('waiter', '"Ops ""x"""."Line_seq"', $3::bigint)`);
    // The last value is read only once the locked row exists; a role without UPDATE calls no setval.
    expect(text).toContain('CASE WHEN k.one = 1 THEN pg_sequence_last_value(s.name::regclass) END');
    expect(text).toContain(`CASE WHEN may THEN setval(name::regclass, least(top + ${RAISE_MARGIN}, 140737488355327))`);
    expect(text).toContain('WHERE NOT pg_is_in_recovery()');
    expect(text).toContain('WHERE s.top >> 47 = $1::bigint');
  });

  it('what the owner runs where the role may not raise: no parameter, the right table and column', () => {
    const n = leaseObjectNames(defaults);
    expect(ownerRaiseSql(n, 'fencing')).toBe(
      `SELECT setval('"public"."job_lease_fencing_seq"', (SELECT max(fencing_token) & 140737488355327 FROM ` +
        `"public"."job_lease") + 1048576)`,
    );
    expect(ownerRaiseSql(n, 'waiter')).toContain(
      `(SELECT max(seq) & 140737488355327 FROM "public"."job_lease_waiter")`,
    );
  });
});
