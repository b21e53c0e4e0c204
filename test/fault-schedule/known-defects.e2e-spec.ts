/**
 * Library defects the fault schedule found, each reproduced deterministically. While a defect is there its test is a
 * `test.failing` (it states the guarantee and fails, so this file passes); once the library is fixed the test is a
 * plain `test` and the seed's entry in regressions.json is `passing`.
 */
import { DedicatedConnection } from '../../libs/lease/src/internal.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { eventually, useTestDatabase } from '../support/db.js';

const db = useTestDatabase('schedule_defects');

// Seed 3 (regressions.json): close() resolved with a heartbeat connection still open. The session bounds of a
// dedicated connection are set by a statement after connect(); when it failed, the connected client was dropped
// without being ended, so nothing could close it. Fixed by the hardening of issue 21 (a connection that fails at any
// step of its opening is closed). Aimed, not timed: every connection completes its startup, then its set-up statement
// never hears back (the proxy holds every later reply) and times out at the connect bound (300 ms).
test('a dedicated connection whose session setup fails leaves no connection behind, even after close()', async () => {
  const { proxy, url } = await TcpProxy.inFrontOf(db.url);
  try {
    proxy.holdRepliesAfterReady();
    const connection = new DedicatedConnection(
      () => ({ connectionString: url, application_name: 'defect-probe' }),
      300,
      1_000,
    );
    for (let i = 0; i < 3; i++) await expect(connection.query({ text: 'SELECT 1' })).rejects.toThrow();
    await connection.close();
    const left = () =>
      db.admin
        .query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'defect-probe'`)
        .then(({ rows }) => rows[0].n);
    await eventually(left, (n) => n === 0, 'no connection of the closed DedicatedConnection', 3_000);
  } finally {
    await proxy.stop();
  }
});
