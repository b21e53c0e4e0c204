/**
 * One process of the join spec, run with `node --import tsx`: opens a LeaseService and calls `run(key, work,
 * { onBusy: 'join' })`. Its work says `running` (with its fencing token) and returns once the parent says `finish`;
 * the call's outcome goes back as `settled`. Exits when the parent goes.
 */
import { openService } from '../../support/lease-service.js';

interface ChildConfig {
  url: string;
  owner: string;
  key: string;
}

const config = JSON.parse(process.env.JOIN_CHILD ?? '{}') as ChildConfig;
process.on('disconnect', () => process.exit(0));
setTimeout(() => process.exit(1), 120_000).unref();

const opened = await openService(config.url, {
  owner: config.owner,
  timing: { heartbeatIntervalMs: 300, leaseTimeoutMs: 3_000, waiterTimeoutMs: 600, waitPollIntervalMs: 200 },
});
const finish = new Promise<void>((resolve) => process.on('message', (message) => message === 'finish' && resolve()));
process.send?.({ type: 'ready' });
try {
  const value = await opened.service.run(
    config.key,
    async (lease) => {
      process.send?.({ type: 'running', fencingToken: String(lease.fencingToken) });
      await finish;
      return { by: config.owner, fencingToken: String(lease.fencingToken) };
    },
    { onBusy: { join: { timeoutMs: 30_000 } } },
  );
  process.send?.({ type: 'settled', value });
} catch (error) {
  process.send?.({ type: 'settled', error: { name: (error as Error).name, message: (error as Error).message } });
}
await opened.close();
