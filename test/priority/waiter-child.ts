/**
 * A waiting process for the dead-waiter specs, run with `node --import tsx` (no Nest DI): queues for a key, reports
 * over IPC, releases when told. It never outlives the test: it exits when the parent goes away, or after two minutes.
 */
import { LeaseService, type LeaseModuleOptions } from 'nest-pg-lease';
import { DataSource } from 'typeorm';

interface ChildConfig {
  url: string;
  key: string;
  priority: number;
  owner: string;
  options: LeaseModuleOptions;
}

const config = JSON.parse(process.env.PRIORITY_WAITER ?? '{}') as ChildConfig;
const send = (message: Record<string, unknown>) => process.send?.(message);
process.on('disconnect', () => process.exit(0));
setTimeout(() => process.exit(0), 120_000).unref();

const dataSource = new DataSource({
  type: 'postgres',
  url: config.url,
  applicationName: config.owner,
  extra: { max: 2 },
});
await dataSource.initialize();
const service = new LeaseService(dataSource, { ...config.options, owner: config.owner });
await service.init();
send({ type: 'ready', pid: process.pid });
const lease = await service
  .acquire(config.key, { priority: config.priority, onBusy: { wait: { timeoutMs: 60_000 } } })
  .catch((error: unknown) => {
    // Said, not swallowed: the parent's log shows why no row appeared.
    console.error(`waiter-child ${config.owner}: acquire failed: ${String(error)}`);
    throw error;
  });
send({ type: 'granted', fencingToken: String(lease.fencingToken) });
process.on('message', (message) => {
  if (message === 'release') void lease.release().then(() => send({ type: 'released' }));
});
