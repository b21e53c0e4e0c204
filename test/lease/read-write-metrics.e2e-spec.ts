/**
 * Read-write leases in the Prometheus metrics (issue 43: metrics cover the modes): `lease_read_write_held` counts the
 * readers and writers this process holds per key template and mode; a read-write lease is no semaphore slot.
 */
import { LeaseMetrics } from 'nest-pg-lease/prometheus';
import { Registry } from 'prom-client';
import { useTestDatabase } from '../support/db.js';

describe('read-write leases in the metrics', () => {
  const db = useTestDatabase('rw_metrics');

  test('lease_read_write_held counts readers and the writer per key template; lease_slots_held does not', async () => {
    const { service } = await db.open();
    const registry = new Registry();
    const metrics = new LeaseMetrics(service, { registry });
    const keyTemplate = 'rw:metrics:{id}';
    const held = (mode: 'shared' | 'exclusive', n: number) =>
      `lease_read_write_held{key_template="${keyTemplate}",mode="${mode}"} ${n}`;
    const gauge = async () => (await registry.getSingleMetricAsString('lease_read_write_held')) ?? '';
    try {
      const readers = [
        (await service.tryAcquire('rw:metrics:1', { mode: 'shared', keyTemplate }))!,
        (await service.tryAcquire('rw:metrics:1', { mode: 'shared', keyTemplate }))!,
      ];
      expect(await gauge()).toContain(held('shared', 2));
      await readers[0].release();
      expect(await gauge()).toContain(held('shared', 1));
      await readers[1].release();
      expect(await gauge()).toContain(held('shared', 0));
      const writer = (await service.tryAcquire('rw:metrics:1', { mode: 'exclusive', keyTemplate }))!;
      expect(await gauge()).toContain(held('exclusive', 1));
      await writer.release();
      expect(await gauge()).toContain(held('exclusive', 0));
      expect(await registry.getSingleMetricAsString('lease_slots_held')).not.toContain(keyTemplate);
      expect(await registry.getSingleMetricAsString('lease_acquisitions_total')).toContain(
        `lease_acquisitions_total{key_template="${keyTemplate}"} 3`,
      );
    } finally {
      metrics.close();
    }
  });
});
