import diagnostics from 'node:diagnostics_channel';
import { Registry } from 'prom-client';
import { firstValueFrom } from 'rxjs';
import { filter } from 'rxjs/operators';
import { LEASE_CHANNELS, type LeaseEvent, type LeaseEventType } from 'nest-pg-lease';
import { LeaseMetrics } from 'nest-pg-lease/prometheus';
import { useTestDatabase } from '../support/db.js';
import { sample } from '../demo/support.js';

// Lease events on node:diagnostics_channel, and the duration histograms of the Prometheus integration, against a real
// PostgreSQL.

const db = useTestDatabase('events');
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('diagnostics_channel', () => {
  test('every event of events$ is published, the same object, on the channel of its type', async () => {
    const { service, close } = await db.open();
    const published: Array<[string, LeaseEvent]> = [];
    const emitted: LeaseEvent[] = [];
    const subscription = service.events$.subscribe((event) => emitted.push(event));
    const listeners = Object.entries(LEASE_CHANNELS).map(([type, name]) => {
      const listener = (message: unknown) => published.push([type, message as LeaseEvent]);
      diagnostics.subscribe(name, listener);
      return () => diagnostics.unsubscribe(name, listener);
    });
    try {
      const lease = await service.tryAcquire('chan:1', { keyTemplate: 'chan:{id}' });
      expect(await service.tryAcquire('chan:1', { keyTemplate: 'chan:{id}' })).toBeNull();
      const waiting = firstValueFrom(service.events$.pipe(filter((event) => event.type === 'waiting')));
      const waiter = service.acquire('chan:1', { keyTemplate: 'chan:{id}', onBusy: { wait: { timeoutMs: 10_000 } } });
      await waiting;
      await lease!.release();
      await (await waiter).release();

      const types = published.map(([type]) => type);
      for (const type of [
        'acquired',
        'busy',
        'acquire-ended',
        'waiting',
        'wait-ended',
        'released',
      ] satisfies LeaseEventType[]) {
        expect(types).toContain(type);
      }
      // The same objects, in the same order, on the channel named after each one's type.
      expect(published.map(([, event]) => event)).toEqual(emitted);
      for (const [index, [type, event]] of published.entries()) {
        expect(event).toBe(emitted[index]);
        expect(event.type).toBe(type);
        if ('keyTemplate' in event) expect(event.keyTemplate).toBe('chan:{id}');
      }
      expect(LEASE_CHANNELS.lost).toBe('nest-pg-lease:lost');
    } finally {
      for (const unsubscribe of listeners) unsubscribe();
      subscription.unsubscribe();
      await close();
    }
    // Nothing subscribes any more: nothing is published.
    for (const name of Object.values(LEASE_CHANNELS)) expect(diagnostics.channel(name).hasSubscribers).toBe(false);
  });
});

describe('LeaseMetrics histograms', () => {
  test('acquire, wait and hold durations by key template and outcome; counters by key template; never a key', async () => {
    const { service, close } = await db.open();
    const registry = new Registry();
    const metrics = new LeaseMetrics(service, { registry });
    const template = { keyTemplate: 'job:{id}' };
    const read = async (name: string, labels: Record<string, string> = {}) =>
      sample(await registry.metrics(), name, labels);
    try {
      const lease = await service.tryAcquire('job:1', template);
      expect(await service.tryAcquire('job:1', template)).toBeNull();
      const waiting = firstValueFrom(service.events$.pipe(filter((event) => event.type === 'waiting')));
      const waiter = service.acquire('job:1', { ...template, onBusy: { wait: { timeoutMs: 10_000 } } });
      await waiting;
      await sleep(300);
      await lease!.release();
      const second = await waiter;
      // The second holder loses its lease: a hold ended by a loss, labelled by its reason.
      const lost = firstValueFrom(service.events$.pipe(filter((event) => event.type === 'lost')));
      await db.admin.query("UPDATE job_lease SET lease_token = gen_random_uuid() WHERE target_id = 'job:1'");
      await lost;
      await second.release();
      // A call with no template is labelled '(none)'.
      await (await service.tryAcquire('other:1'))!.release();

      const job = { key_template: 'job:{id}' };
      expect(await read('lease_acquire_duration_seconds_count', { ...job, outcome: 'acquired' })).toBe(2);
      expect(await read('lease_acquire_duration_seconds_count', { ...job, outcome: 'busy' })).toBe(1);
      // The waiter's acquisition took its wait: at least the 300 ms the first lease was held after it queued.
      expect(await read('lease_wait_duration_seconds_count', { ...job, outcome: 'granted' })).toBe(1);
      expect(await read('lease_wait_duration_seconds_sum', { ...job, outcome: 'granted' })).toBeGreaterThanOrEqual(0.3);
      expect(await read('lease_wait_duration_seconds_bucket', { ...job, outcome: 'granted', le: '0.25' })).toBe(0);
      expect(await read('lease_wait_duration_seconds_bucket', { ...job, outcome: 'granted', le: '+Inf' })).toBe(1);
      expect(await read('lease_acquire_duration_seconds_bucket', { ...job, outcome: 'acquired', le: '0.25' })).toBe(1);
      expect(await read('lease_hold_duration_seconds_count', { ...job, outcome: 'released' })).toBe(1);
      expect(await read('lease_hold_duration_seconds_sum', { ...job, outcome: 'released' })).toBeGreaterThanOrEqual(
        0.3,
      );
      expect(await read('lease_hold_duration_seconds_count', { ...job, outcome: 'taken-over' })).toBe(1);
      expect(await read('lease_hold_duration_seconds_count', { key_template: '(none)', outcome: 'released' })).toBe(1);

      expect(await read('lease_acquisitions_total', job)).toBe(2);
      expect(await read('lease_acquisitions_total', { key_template: '(none)' })).toBe(1);
      expect(await read('lease_busy_total', job)).toBe(1);
      expect(await read('lease_lost_total', { ...job, reason: 'taken-over' })).toBe(1);
      expect(await read('lease_lost_total', { ...job, reason: 'failover' })).toBe(0);
      expect(await read('lease_waits_total', { ...job, outcome: 'granted' })).toBe(1);
      expect(await read('lease_waits_total', { ...job, outcome: 'timeout' })).toBe(0);

      const text = await registry.metrics();
      expect(text).not.toContain('job:1');
      expect(text).not.toContain('other:1');
    } finally {
      metrics.close();
      await close();
    }
  });
});
