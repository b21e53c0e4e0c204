/**
 * A process whose DataSource is destroyed under a waiting LeaseService (no close()), whose LISTEN connection then
 * drops: the reconnect timer must not crash it (Node ends a process on an unhandled rejection). Prints "survived".
 */
import { LeaseService } from 'nest-pg-lease';
import { Logger } from '@nestjs/common';
import pg from 'pg';
import { DataSource } from 'typeorm';

Logger.overrideLogger(['error']);
const url = process.env.PRIORITY_DB_URL!;
const owner = `orphan-${process.pid}`;
const start = async (name: string) => {
  const dataSource = new DataSource({ type: 'postgres', url, applicationName: name });
  await dataSource.initialize();
  const service = new LeaseService(dataSource, {
    owner: name,
    tables: { createSchema: true },
    timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000 },
  });
  await service.init();
  return { dataSource, service };
};
const holder = await start(`${owner}-holder`);
const waiter = await start(owner);
const held = await holder.service.tryAcquire('orphan');
const admin = new pg.Client({ connectionString: url });
await admin.connect();
const waiting = waiter.service.acquire('orphan', { onBusy: { wait: { timeoutMs: 10_000 } } }).catch(() => undefined);
while ((await admin.query('SELECT 1 FROM job_lease_waiter WHERE owner = $1', [owner])).rowCount === 0) {
  await new Promise((resolve) => setTimeout(resolve, 20));
}
await waiter.dataSource.destroy();
await admin.query(
  `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`,
  [`${owner}:heartbeat`],
);
// The first reconnect comes 100 ms after the loss; give it time to fail.
await new Promise((resolve) => setTimeout(resolve, 1_500));
await waiting;
await held!.release();
await holder.service.close();
await holder.dataSource.destroy();
await admin.end();
console.log('survived');
process.exit(0);
