/**
 * Waiting while the database does not answer (a silent partition: a frozen TCP proxy). The promise of a wait must
 * still settle on time: LeaseWaitTimeoutError at waitTimeoutMs, the signal's reason on abort.
 *
 * Every statement of a wait is bounded by the wait's deadline (plus a short grace for a statement in flight) and by
 * the signal; a lease that arrives after the wait gave up is released.
 */
import { LeaseWaitTimeoutError } from 'nest-pg-lease';
import { eventually, useTestDatabase } from '../support/db.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { type Proc, startProc, track, untilQueued } from './helpers.js';

const db = useTestDatabase('prio_partition');

test('waitTimeoutMs and abort settle the wait on time while the database does not answer', async () => {
  const holder = await startProc(db.url, 'holder');
  const proxy = TcpProxy.forUrl(db.url);
  let cut: Proc | undefined;
  try {
    await holder.service.tryAcquire('partition:a');
    await holder.service.tryAcquire('partition:b');
    cut = await startProc(await proxy.start(db.url), 'cut-off');
    const queued = track(cut.service.acquire('partition:a', { onBusy: { wait: { timeoutMs: 1_000 } } }));
    await untilQueued(db.admin, 'partition:a', cut.owner);
    proxy.freeze();
    const controller = new AbortController();
    const reason = new Error('gave up');
    const fresh = track(
      cut.service.acquire('partition:b', { onBusy: { wait: { timeoutMs: 60_000 } }, signal: controller.signal }),
    );
    controller.abort(reason);
    await eventually(() => queued.settled() && fresh.settled(), Boolean, 'both waits settled', 5_000);
    expect(queued.error).toBeInstanceOf(LeaseWaitTimeoutError);
    expect(fresh.error).toBe(reason);
  } finally {
    proxy.thaw();
    await cut?.close();
    await proxy.stop();
    await holder.close();
  }
}, 30_000);
