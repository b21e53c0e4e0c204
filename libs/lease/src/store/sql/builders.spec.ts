import { resolveLeaseOptions } from '../../options/resolve-lease-options.js';
import { leaseObjectNames } from '../../schema/lease-schema.js';
import { buildStatements, preparedPrefix } from '../statement-texts.js';
import { batchAcquireSql, singleAcquireSql } from './acquire.sql.js';
import { missingPrivilegesSql, privilegeChecks } from './bootstrap.sql.js';
import { historyToken, sequenceLiteral, serverHistorySql, TIMELINE, timelineOf } from './fencing-token.js';
import { NO_FAULTS } from './statement-faults.js';
import { aged, bornWithin, headOf, live, liveWaiter, taken } from './fragments.js';
import { renewSql } from './renew.sql.js';

/** The SQL builders beyond the snapshot: quoting, parameters, and where texts must differ. */
const custom = resolveLeaseOptions({
  tables: { schema: 'Ops "x"', tableName: `it's`, waiterTableName: 'Line' },
  owner: 'o',
});
const defaults = resolveLeaseOptions({ owner: 'o' });
const texts = (options: typeof defaults) => Object.entries(buildStatements(options).sql);

/** The highest `$n` a text binds, and whether every `$1 … $n` appears. */
function parameters(text: string): { max: number; all: boolean } {
  const used = new Set([...text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
  const max = Math.max(0, ...used);
  return { max, all: Array.from({ length: max }, (_, i) => used.has(i + 1)).every(Boolean) };
}

describe('SQL builders', () => {
  it.each(texts(custom))('%s names only the quoted custom objects', (_, text) => {
    expect(text).not.toContain('job_lease');
    // Each custom name appears only quoted and qualified (`."it's…"`, `."Line…"`), never bare.
    expect(text).not.toMatch(/(?<!\.")it's/);
    expect(text).not.toMatch(/(?<!\.")Line/);
  });

  it.each(texts(custom))('%s binds $1 … $n without gaps', (_, text) => {
    expect(parameters(text).all).toBe(true);
  });

  it('every value is a parameter: no owner, key or timeout is spliced into a text', () => {
    const owner = resolveLeaseOptions({ owner: 'splice-me-owner' });
    for (const [, text] of texts(owner)) expect(text).not.toContain('splice-me-owner');
  });

  it('quotes identifiers (doubling ") and a sequence name as a string literal (doubling \')', () => {
    const n = leaseObjectNames(custom);
    expect(n.lease).toBe(`"Ops ""x"""."it's"`);
    expect(n.fencingSequence).toBe(`"Ops ""x"""."it's_fencing_seq"`);
    expect(sequenceLiteral(n.fencingSequence)).toBe(`'"Ops ""x"""."it''s_fencing_seq"'`);
  });

  it('the texts differ where they must: queueing, the system identifier, single vs batch', () => {
    const n = leaseObjectNames(defaults);
    const single = singleAcquireSql(n, TIMELINE, false, 1800000, NO_FAULTS);
    const queueing = singleAcquireSql(n, TIMELINE, true, 1800000, NO_FAULTS);
    expect(single).not.toBe(queueing);
    expect(parameters(single).max).toBe(9);
    expect(parameters(queueing).max).toBe(12);
    expect(renewSql(n, true, TIMELINE)).toContain('pg_control_system()');
    expect(renewSql(n, false, TIMELINE)).not.toContain('pg_control_system()');
    expect(parameters(batchAcquireSql(n, TIMELINE, 1800000)).max).toBe(4);
    expect(new Set(texts(defaults).map(([, text]) => text)).size).toBe(texts(defaults).length);
  });

  it('a batch never waits for a lock longer than BATCH_LOCK_WAIT_MS; the single statement has no such bound', () => {
    const n = leaseObjectNames(defaults);
    expect(batchAcquireSql(n, TIMELINE, 1800000)).toContain("set_config('lock_timeout', '10', true)");
    expect(singleAcquireSql(n, TIMELINE, false, 1800000, NO_FAULTS)).not.toContain('lock_timeout');
  });

  it('fragments read the row alias they are given', () => {
    expect(live('x')).toContain('x.lease_token IS NOT NULL');
    expect(taken('y')).toContain('y.acquired_at + y.hold_ms');
    expect(liveWaiter('w2')).toContain('w2.heartbeat_at + w2.timeout_ms');
    expect(aged('q.queued_at', '$7')).toMatch(/^\(q\.priority::bigint \+ CASE WHEN \$7::bigint IS NULL/);
    expect(bornWithin('$5', '$9')).toBe(`statement_timestamp() - ($5 - $9::int) * interval '1 millisecond'`);
    expect(headOf(leaseObjectNames(defaults), 'g.t', '$4', '$2::uuid')).toContain('AND w.waiter_id <> $2::uuid');
    expect(headOf(leaseObjectNames(defaults), 'g.t', '$4')).not.toContain('<>');
  });

  it('the token layout: (timeline << 47) | n, NULL past 47 bits or timeline 2^16', () => {
    expect(timelineOf((1n << 47n) | (1n << 40n))).toBe(1n);
    expect(timelineOf((5n << 47n) | 123n)).toBe(5n);
    expect(timelineOf((127n << 40n) | 5n)).toBe(0n); // tokens of the 40-bit layout before it (timelines below 128)
    expect(timelineOf(42n)).toBe(0n);
    const token = historyToken('s.v');
    expect(token).toContain('s.v BETWEEN 0 AND 140737488355327');
    expect(token).toContain('h.timeline < 65536');
    expect(token).toContain('(h.timeline << 47) | s.v');
  });

  it('the server history reads the system identifier only when asked', () => {
    expect(serverHistorySql(true, TIMELINE)).toContain('pg_control_system()');
    expect(serverHistorySql(false, TIMELINE)).toContain('NULL::text AS system_id');
  });

  it('the privilege check binds an object and a right per check, in the order of the checks', () => {
    const checks = privilegeChecks(leaseObjectNames(defaults), 'public');
    expect(checks).toHaveLength(11);
    expect(checks[0]).toEqual(['has_schema_privilege', 'public', 'USAGE', 'USAGE on schema "public"']);
    const text = missingPrivilegesSql(checks);
    expect(parameters(text)).toEqual({ max: 22, all: true });
    expect(text).toContain('has_sequence_privilege($21, $22)');
  });

  it('prepared names carry a hash of the names: two configurations never share one; none behind a pooler', () => {
    expect(preparedPrefix(defaults)).toMatch(/^lease_[0-9a-f]{10}$/);
    expect(preparedPrefix(custom)).not.toBe(preparedPrefix(defaults));
    expect(buildStatements(defaults).named('acquire')).toEqual({ name: `${preparedPrefix(defaults)}_acquire` });
    expect(buildStatements(resolveLeaseOptions({ connections: { pooler: 'transaction' } })).named('acquire')).toEqual(
      {},
    );
  });

  it('a fixed timeline (WAL functions not executable) replaces every call of them but the probe, under other names', () => {
    const fixed = buildStatements(defaults, { timeline: 3n });
    for (const [key, text] of Object.entries(fixed.sql)) {
      const calls = /pg_walfile_name\(pg_current_wal_lsn\(\)\)/;
      if (key === 'walProbe') expect(text).toMatch(calls);
      else expect(text).not.toMatch(calls);
    }
    expect(fixed.sql.acquire).toMatch(/\(3::bigint\)/);
    expect(fixed.named('acquire')).toEqual({ name: `${preparedPrefix(defaults)}_t3_acquire` });
    // Only the timeline differs, wherever the server's was: the builders were given the fixed one.
    const normal = buildStatements(defaults).sql;
    for (const [key, text] of Object.entries(fixed.sql)) {
      const server = normal[key as keyof typeof normal];
      if (key === 'walProbe') expect(text).toBe(server);
      else expect(text.split('(3::bigint)')).toEqual(server.split(TIMELINE));
    }
    expect(fixed.sql.release.split('(3::bigint)').length).toBe(2);
    expect(fixed.sql.renewWaiters).toBe(normal.renewWaiters);
  });

  it('the test-only faults are an argument: only the statements of that build carry them, under other names', () => {
    const faulty = buildStatements(defaults, { faults: { tokenBeforeLock: true } });
    const normal = buildStatements(defaults);
    const changed = Object.keys(normal.sql).filter(
      (key) => faulty.sql[key as keyof typeof normal.sql] !== normal.sql[key as keyof typeof normal.sql],
    );
    expect(changed.sort()).toEqual(['acquire', 'acquireLone', 'acquireOrQueue']);
    for (const key of changed) expect(faulty.sql[key as 'acquire']).toContain('fencing_token = EXCLUDED.fencing_token');
    for (const text of Object.values(normal.sql)) expect(text).not.toContain('fencing_token = EXCLUDED.fencing_token');
    expect(faulty.named('acquire')).toEqual({ name: `${preparedPrefix(defaults)}_f_acquire` });
    // Nothing is left behind for the next build.
    expect(buildStatements(defaults, { faults: NO_FAULTS }).sql).toEqual(normal.sql);
  });

  it('every acquisition fails on the server past half the purge bound, after its writes', () => {
    const sql = buildStatements(defaults, { purgeAfterMs: 4_000 }).sql;
    for (const text of [sql.acquire, sql.acquireLone, sql.acquireOrQueue, sql.batchAcquire]) {
      expect(text).toContain('clock_timestamp() - statement_timestamp() > 2000');
    }
    expect(buildStatements(defaults).sql.acquire).toContain('statement_timestamp() > 1800000');
    expect(buildStatements(defaults, { purgeAfterMs: 4_000 }).named('acquire').name).toMatch(/_p4000_acquire$/);
  });
});
