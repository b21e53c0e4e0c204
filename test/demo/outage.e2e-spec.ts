import { HealthIndicatorService } from '@nestjs/terminus';
import { leaseErrorToHttp, LeaseUnavailableError } from 'nest-pg-lease';
import { LeaseHealthIndicator } from '../../libs/lease/src/integrations/terminus.js';
import { eventually, startService, useTestDatabase } from '../support/db.js';
import { TcpProxy } from '../support/tcp-proxy.js';

// A database outage longer than the lease timeout, then recovery (issue 28, item 2): the database refuses connections
// (ECONNREFUSED: nothing listens) for 1.5 s with a 1 s lease timeout, while one lease is being released and another is
// held. Afterwards the health indicator must come back up, and the row the failed release left must be released.

const db = useTestDatabase('outage');

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('a database outage, then recovery', () => {
  test('fenced() answers LeaseUnavailableError; health comes back up; the unreleased row is released', async () => {
    const { proxy, url } = await TcpProxy.inFrontOf(db.url);
    const { service, close } = await startService(url, { timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000 } });
    const indicator = new LeaseHealthIndicator(service, new HealthIndicatorService());
    const tokenOf = async (targetKey: string) =>
      (await db.admin.query('SELECT lease_token FROM job_lease WHERE target_id = $1', [targetKey])).rows[0]
        ?.lease_token as string | null | undefined;
    try {
      const released = (await service.tryAcquire('outage:released'))!;
      const kept = (await service.tryAcquire('outage:kept'))!;
      expect(await indicator.isHealthy('leases')).toMatchObject({ leases: { status: 'up', held: 2 } });

      await proxy.down();
      // The holder's fenced save: the library's error (503 + Retry-After), not the driver's ECONNREFUSED.
      const save = await kept.fenced(async (manager) => manager.query('SELECT 1')).catch((error: unknown) => error);
      expect(save).toBeInstanceOf(LeaseUnavailableError);
      expect(leaseErrorToHttp(save)).toMatchObject({ status: 503 });
      // A release that cannot land now; the database is down for longer than the lease timeout.
      await released.release();
      expect((await indicator.isHealthy('leases', { timeoutMs: 1_000 })).leases.status).toBe('down');
      await sleep(1_500);
      expect(kept.isHeld()).toBe(false);
      await proxy.up();

      // Health reflects what the process holds now (nothing) and whether the database answers (it does).
      await eventually(
        async () => (await indicator.isHealthy('leases')).leases.status,
        (status) => status === 'up',
        'the indicator up again',
        5_000,
      );
      // The row the failed release left is released once the database answers.
      await eventually(
        () => tokenOf('outage:released'),
        (token) => token === null,
        'the row released',
        5_000,
      );

      // And heartbeats work again: a new lease is up with a fresh heartbeat.
      const again = (await service.tryAcquire('outage:again'))!;
      await sleep(300);
      expect(await indicator.isHealthy('leases')).toMatchObject({ leases: { status: 'up', held: 1 } });
      await again.release();
    } finally {
      await close();
      await proxy.stop();
    }
  });
});
