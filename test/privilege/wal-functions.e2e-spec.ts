import { randomBytes } from 'node:crypto';
import { ConsoleLogger, Logger } from '@nestjs/common';
import { adminClient, eventually, startService, useTestDatabase } from '../support/db.js';

/**
 * An Aurora-like server: EXECUTE on pg_current_wal_lsn() and pg_walfile_name() revoked from PUBLIC (Aurora answers
 * both "not supported"), the application a plain role with only the GRANTs of docs/privileges.md. The library starts, says once
 * at bootstrap that it runs without the timeline guard, and keeps its guarantees within the server's history: tokens
 * rise, above every token already in the table.
 */
describe('WAL functions not executable (an Aurora-like server)', () => {
  const db = useTestDatabase('walfuncs');
  const role = `lease_dml_${randomBytes(4).toString('hex')}`;
  const password = randomBytes(12).toString('hex');
  let appUrl: string;
  let oldToken: bigint;

  beforeAll(async () => {
    const owner = await startService(db.url); // the owner (a superuser here) runs the migrations
    // A token of an earlier timeline already in the table (a restore from a promoted server, say).
    await owner.service.tryAcquire('old:key').then((lease) => lease!.release());
    await owner.close();
    // The same sequence value, drawn on timeline 3.
    const { rows } = await db.admin.query<{ token: string }>(
      `UPDATE job_lease SET fencing_token = (3::bigint << 47) | (fencing_token & ((1::bigint << 47) - 1))
       WHERE target_id = 'old:key' RETURNING fencing_token::text AS token`,
    );
    oldToken = BigInt(rows[0].token);
    await db.admin.query(`CREATE ROLE ${role} LOGIN PASSWORD '${password}'`);
    await db.admin.query('REVOKE CREATE ON SCHEMA public FROM PUBLIC');
    await db.admin.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON job_lease, job_lease_waiter TO ${role}`);
    await db.admin.query(`GRANT USAGE ON SEQUENCE job_lease_fencing_seq, job_lease_waiter_seq TO ${role}`);
    // Function rights live in the database's own catalog: this changes only the test's database.
    await db.admin.query('REVOKE EXECUTE ON FUNCTION pg_current_wal_lsn() FROM PUBLIC');
    await db.admin.query('REVOKE EXECUTE ON FUNCTION pg_walfile_name(pg_lsn) FROM PUBLIC');
    const url = new URL(db.url);
    url.username = role;
    url.password = password;
    appUrl = url.toString();
  });

  afterAll(async () => {
    const server = await adminClient(new URL('/postgres', db.url).toString());
    await server.query(`DROP ROLE IF EXISTS ${role}`);
    await server.end();
  });

  test('bootstrap: no raw error, one log line naming the fallback; leases, waits, fences and heartbeats work', async () => {
    const warnings: string[] = [];
    const quiet = () => undefined;
    Logger.overrideLogger({ log: quiet, error: quiet, warn: (message: unknown) => warnings.push(String(message)) });
    const a = await startService(appUrl, { tables: { createSchema: false }, owner: 'a' }).finally(() =>
      Logger.overrideLogger(new ConsoleLogger()),
    );
    const b = await startService(appUrl, { tables: { createSchema: false }, owner: 'b' });
    try {
      const fallback = warnings.filter((line) => /pg_current_wal_lsn/.test(line));
      expect(fallback).toHaveLength(1);
      expect(fallback[0]).toMatch(/timeline guard is off/);

      const lost: string[] = [];
      let renewals = 0;
      a.service.events$.subscribe((event) => {
        if (event.type === 'lost') lost.push(event.reason);
        if (event.type === 'renewed') renewals++;
      });
      const first = (await a.service.tryAcquire('old:key'))!;
      expect(first).not.toBeNull();
      // Above the token already in the table, whatever timeline it carries.
      expect(first.fencingToken).toBeGreaterThan(oldToken);
      expect(first.fencingToken >> 47n).toBe(3n);
      await eventually(
        () => renewals,
        (n) => n >= 3,
        'three heartbeats',
      );
      expect(lost).toEqual([]);
      const written = await first.fenced((manager) => manager.query('SELECT 1 AS one'));
      expect(written).toEqual([{ one: 1 }]);

      // A waiter in line (the waiter order uses the same fallback), granted on release.
      const waiting = b.service.acquire('old:key', { priority: 1, onBusy: { wait: { timeoutMs: 5_000 } } });
      await new Promise((resolve) => setTimeout(resolve, 100));
      await first.release();
      const second = await waiting;
      expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
      await second.release();

      // Batches (group commit) draw through the same fallback.
      const many = await Promise.all(['k:1', 'k:2', 'k:3', 'k:4'].map((key) => a.service.tryAcquire(key)));
      expect(many.every((lease) => lease !== null)).toBe(true);
      for (const lease of many) await lease!.release();
    } finally {
      await b.close();
      await a.close();
    }
  });
});
