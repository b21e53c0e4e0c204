import { HealthIndicatorService } from '@nestjs/terminus';
import { Registry } from 'prom-client';
import { LeaseMetrics } from '../../libs/lease/src/integrations/prometheus.js';
import { LeaseHealthIndicator } from '../../libs/lease/src/integrations/terminus.js';
import { eventually, startService, useTestDatabase } from '../support/db.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { sample } from './support.js';

// The library's optional integrations on their own, against a real PostgreSQL: what each metric counts, and when
// the health indicator turns down.

const db = useTestDatabase('integrations');

/** A row held by a holder that is not one of our services: dead (expired long ago) or alive for ten minutes. */
async function foreignLease(targetKey: string, state: 'dead' | 'alive'): Promise<void> {
  const since = state === 'dead' ? "now() - interval '1 hour'" : 'now()';
  await db.admin.query(
    `INSERT INTO job_lease (target_id, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at, updated_at)
     VALUES ($1, gen_random_uuid(), nextval('job_lease_fencing_seq'), 'elsewhere', 0, $2, ${since}, ${since})`,
    [targetKey, state === 'dead' ? 1_000 : 600_000],
  );
}

describe('LeaseMetrics', () => {
  test('counts acquisitions, busy refusals, losses, takeovers, waits and heartbeat latency; gauges held leases', async () => {
    const { service, close } = await startService(db.url);
    const registry = new Registry();
    const metrics = new LeaseMetrics(service, { registry });
    const read = async (name: string, labels?: Record<string, string>) =>
      sample(await registry.metrics(), name, labels);
    try {
      expect(await read('lease_acquisitions_total')).toBe(0);

      const lease = await service.tryAcquire('metrics:a');
      expect(lease).not.toBeNull();
      expect(await service.tryAcquire('metrics:a')).toBeNull();
      expect(await read('lease_acquisitions_total')).toBe(1);
      expect(await read('lease_busy_total')).toBe(1);
      expect(await read('lease_held')).toBe(1);
      // Liveness only (a renewal that succeeds): on a loaded CI machine the test timings' short renewal bound failed
      // every renewal for the default 10 s once, so the wait is longer; what is counted does not change.
      await eventually(
        () => read('lease_heartbeat_latency_seconds_count'),
        (count) => count > 0,
        'a renewal',
        30_000,
      );

      // Someone else's token on the row: the next heartbeat finds the lease taken over.
      await db.admin.query("UPDATE job_lease SET lease_token = gen_random_uuid() WHERE target_id = 'metrics:a'");
      await eventually(
        () => read('lease_lost_total', { reason: 'taken-over' }),
        (lost) => lost === 1,
        'the loss',
      );
      expect(await read('lease_held')).toBe(0);

      await foreignLease('metrics:dead', 'dead');
      const takenOver = await service.tryAcquire('metrics:dead');
      expect(takenOver).not.toBeNull();
      expect(await read('lease_takeovers_total')).toBe(1);
      expect(await read('lease_acquisitions_total')).toBe(2);

      await foreignLease('metrics:alive', 'alive');
      await expect(service.acquire('metrics:alive', { onBusy: { wait: { timeoutMs: 300 } } })).rejects.toThrow(
        /Gave up waiting/,
      );
      expect(await read('lease_waits_total', { outcome: 'timeout' })).toBe(1);
      expect(await read('lease_waits_total', { outcome: 'granted' })).toBe(0);
      expect(await read('lease_waiters')).toBe(0);
      await takenOver!.release();
    } finally {
      metrics.close();
      await close();
    }
    // Closed metrics leave the registry, so a new LeaseMetrics can register the same names.
    expect(await registry.metrics()).not.toContain('lease_');
    const again = new LeaseMetrics(service, { registry });
    again.close();
  });
});

describe('LeaseHealthIndicator', () => {
  test('up with the held count; down when a heartbeat is late; down when the database is gone', async () => {
    // Heartbeats every 10 s: nothing renews the lease during the test, so its heartbeat age only grows. Through a
    // proxy, so that the database can be made to vanish (a silent partition) for the last check.
    const { proxy, url } = await TcpProxy.inFrontOf(db.url);
    const { service, close } = await startService(url, {
      timing: { heartbeatIntervalMs: 10_000, leaseTimeoutMs: 60_000 },
    });
    const indicator = new LeaseHealthIndicator(service, new HealthIndicatorService());
    try {
      const lease = await service.tryAcquire('health:a');
      expect(await indicator.isHealthy('leases')).toMatchObject({ leases: { status: 'up', held: 1, waiting: 0 } });

      await new Promise((resolve) => setTimeout(resolve, 100));
      const late = await indicator.isHealthy('leases', { maxHeartbeatAgeMs: 50 });
      expect(late.leases.status).toBe('down');
      expect(late.leases.message).toMatch(/heartbeats late .*"health:a"/);

      await lease!.release();
      proxy.freeze();
      const gone = await indicator.isHealthy('leases', { timeoutMs: 2_000 });
      expect(gone.leases.status).toBe('down');
    } finally {
      proxy.thaw();
      await close();
      await proxy.stop();
    }
  });
});
