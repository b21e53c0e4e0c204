/**
 * One process of the preemption spec, run with `node --import tsx`: holds `key` at priority 0 and ignores its
 * signal. It says `running` (with its fencing token), `told` when its signal aborts (with the loss reason), and on
 * the parent's `write` tries one fenced write, answering `wrote` with what happened. Exits when the parent goes.
 */
import { LeaseLostError } from 'nest-pg-lease';
import { openService } from '../../support/lease-service.js';

interface ChildConfig {
  url: string;
  key: string;
}

const config = JSON.parse(process.env.PREEMPT_CHILD ?? '{}') as ChildConfig;
process.on('disconnect', () => process.exit(0));
setTimeout(() => process.exit(1), 120_000).unref();

// It renews rarely: the parent's takeover commits before it hears of the request, so the database refuses its write.
const opened = await openService(config.url, {
  owner: 'child',
  timing: { heartbeatIntervalMs: 2_000, leaseTimeoutMs: 20_000 },
});
const lease = await opened.service.acquire(config.key, { priority: 0 });
lease.signal.addEventListener('abort', () => {
  const reason: unknown = lease.signal.reason;
  process.send?.({ type: 'told', reason: reason instanceof LeaseLostError ? reason.reason : String(reason) });
});
process.on('message', (message) => {
  if (message !== 'write') return;
  lease
    .fenced(async (manager) => {
      await manager.query('SELECT 1');
      return 'saved';
    })
    .then(
      (saved) => process.send?.({ type: 'wrote', saved }),
      (error: unknown) =>
        process.send?.({
          type: 'wrote',
          error: { name: (error as Error).name, reason: (error as LeaseLostError).reason },
        }),
    );
});
process.send?.({ type: 'running', fencingToken: String(lease.fencingToken) });
