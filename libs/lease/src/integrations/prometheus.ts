import { type DynamicModule, Module, type OnModuleDestroy } from '@nestjs/common';
import { Counter, Gauge, Histogram, register as defaultRegistry, type Registry } from 'prom-client';
import type { Subscription } from 'rxjs';
import { LeaseService } from '../lease.service.js';

/** Options of `LeaseMetrics` / `LeaseMetricsModule.forRoot()`. */
export interface LeaseMetricsOptions {
  /**
   * Where the metrics are registered.
   * @default prom-client's global registry
   */
  registry?: Registry;
  /**
   * Prefix of every metric name.
   * @default 'lease_'
   */
  prefix?: string;
  /**
   * Buckets of the heartbeat latency histogram, in seconds.
   * @default [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5]
   */
  latencyBuckets?: number[];
  /**
   * Buckets of the wait, hold and acquire duration histograms, in seconds.
   * @default [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600]
   */
  durationBuckets?: number[];
}

const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

/**
 * Prometheus metrics of one `LeaseService`, fed by its `events$`: acquisitions, takeovers, busy refusals, losses,
 * renewal failures, heartbeat latency, wait outcomes, histograms of acquire, wait and hold durations, and gauges of
 * held leases, semaphore slots held, read-write leases held by mode, and waiting calls. Labelled by key template
 * (`key_template`: `@Exclusive`'s template, or a call's `keyTemplate`), never by target key, so cardinality stays fixed
 * however many targets there are.
 *
 * Optional integration (needs `prom-client`): import it from `nest-pg-lease/prometheus`, never from the main entry.
 */
export class LeaseMetrics implements OnModuleDestroy {
  readonly registry: Registry;
  private readonly names: string[] = [];
  private readonly subscription: Subscription;

  constructor(leases: LeaseService, options: LeaseMetricsOptions = {}) {
    const registry = (this.registry = options.registry ?? defaultRegistry);
    const prefix = options.prefix ?? 'lease_';
    const registers = [registry];
    const metricName = (suffix: string) => {
      this.names.push(prefix + suffix);
      return prefix + suffix;
    };
    const acquisitions = new Counter({
      name: metricName('acquisitions_total'),
      help: 'Leases acquired by this process, takeovers of expired leases included',
      labelNames: ['key_template'],
      registers,
    });
    const takeovers = new Counter({
      name: metricName('takeovers_total'),
      help: 'Expired leases of other holders taken over by this process',
      labelNames: ['key_template'],
      registers,
    });
    const busy = new Counter({
      name: metricName('busy_total'),
      help: 'Acquisition attempts refused because the target was held (or a waiter was ahead)',
      labelNames: ['key_template'],
      registers,
    });
    const lost = new Counter({
      name: metricName('lost_total'),
      help: 'Leases lost before release, by reason (taken-over, renewal-deadline, failover, released-by-operator, preempted)',
      labelNames: ['reason', 'key_template'],
      registers,
    });
    const preemptions = new Counter({
      name: metricName('preemptions_total'),
      help: 'Targets this process took from a holder of lower priority (preempt: true), by how: yielded (released in its grace) or forced (taken over at its end)',
      labelNames: ['outcome', 'key_template'],
      registers,
    });
    const renewFailures = new Counter({
      name: metricName('renew_failures_total'),
      help: 'Heartbeat ticks whose batched renewal failed (transient until the local safety deadline)',
      registers,
    });
    const waits = new Counter({
      name: metricName('waits_total'),
      help: 'Waits in the priority line that ended, by outcome (granted, timeout, aborted, error)',
      labelNames: ['outcome', 'key_template'],
      registers,
    });
    const durations = { buckets: options.durationBuckets ?? DURATION_BUCKETS, labelNames: ['key_template', 'outcome'] };
    const acquireDuration = new Histogram({
      name: metricName('acquire_duration_seconds'),
      help: 'Acquisition calls from call to outcome (a wait in line included), by outcome: acquired, taken-over, busy, timeout, aborted, queue-full, shutdown, unavailable, error',
      ...durations,
      registers,
    });
    const waitDuration = new Histogram({
      name: metricName('wait_duration_seconds'),
      help: 'Time spent waiting in the priority line, by outcome: granted, timeout, aborted, error',
      ...durations,
      registers,
    });
    const holdDuration = new Histogram({
      name: metricName('hold_duration_seconds'),
      help: 'Time a lease was held, from acquisition to release (outcome released) or loss (the loss reason)',
      ...durations,
      registers,
    });
    const heartbeatLatency = new Histogram({
      name: metricName('heartbeat_latency_seconds'),
      help: 'Round trip of the successful renewal statement, one observation per renewed lease',
      buckets: options.latencyBuckets ?? [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers,
    });
    new Gauge({
      name: metricName('held'),
      help: 'Leases this process holds now',
      registers,
      collect() {
        this.set(leases.heldLeases().length);
      },
    });
    new Gauge({
      name: metricName('waiters'),
      help: 'Calls of this process waiting in a priority line now',
      registers,
      collect() {
        this.set(leases.waitingCount());
      },
    });
    const slots = new Gauge({
      name: metricName('slots_held'),
      help: 'Semaphore slots (limit above 1) this process holds now, by key template',
      labelNames: ['key_template'],
      registers,
    });
    const readWrite = new Gauge({
      name: metricName('read_write_held'),
      help: 'Read-write leases this process holds now, by key template and mode (shared: readers; exclusive: writers)',
      labelNames: ['key_template', 'mode'],
      registers,
    });
    const leader = new Gauge({
      name: metricName('leader'),
      help: 'Leader elections this process leads now: 1 while elected, 0 once revoked',
      labelNames: ['key_template'],
      registers,
    });
    // A template's counters start at zero when it is first seen, so a dashboard sees its series before the first
    // loss or wait (and `rate()` sees the first increment).
    const seen = new Set<string>();
    const start = (key_template: string) => {
      if (seen.has(key_template)) return;
      seen.add(key_template);
      for (const counter of [acquisitions, takeovers, busy]) counter.inc({ key_template }, 0);
      for (const reason of ['taken-over', 'renewal-deadline', 'failover', 'released-by-operator', 'preempted'])
        lost.inc({ reason, key_template }, 0);
      for (const outcome of ['yielded', 'forced']) preemptions.inc({ outcome, key_template }, 0);
      for (const outcome of ['granted', 'timeout', 'aborted', 'error']) waits.inc({ outcome, key_template }, 0);
    };

    this.subscription = leases.events$.subscribe((event) => {
      if ('keyTemplate' in event) start(event.keyTemplate);
      // A semaphore's slot counts from its grant to its release or loss.
      if ('slot' in event && event.slot !== undefined) {
        const held = event.type === 'acquired' || event.type === 'taken-over';
        if (held || event.type === 'released' || event.type === 'lost') {
          slots.inc({ key_template: event.keyTemplate }, held ? 1 : -1);
        }
      }
      // So does a read-write lease, by its mode.
      if ('mode' in event && event.mode !== undefined) {
        const held = event.type === 'acquired' || event.type === 'taken-over';
        if (held || event.type === 'released' || event.type === 'lost') {
          readWrite.inc({ key_template: event.keyTemplate, mode: event.mode }, held ? 1 : -1);
        }
      }
      switch (event.type) {
        case 'acquired':
          acquisitions.inc({ key_template: event.keyTemplate });
          break;
        case 'taken-over':
          acquisitions.inc({ key_template: event.keyTemplate });
          takeovers.inc({ key_template: event.keyTemplate });
          break;
        case 'preempted':
          preemptions.inc({ outcome: event.forced ? 'forced' : 'yielded', key_template: event.keyTemplate });
          break;
        case 'busy':
          busy.inc({ key_template: event.keyTemplate });
          break;
        case 'lost':
          lost.inc({ reason: event.reason, key_template: event.keyTemplate });
          holdDuration.observe({ key_template: event.keyTemplate, outcome: event.reason }, event.heldMs / 1000);
          break;
        case 'released':
          holdDuration.observe({ key_template: event.keyTemplate, outcome: 'released' }, event.heldMs / 1000);
          break;
        case 'acquire-ended':
          acquireDuration.observe({ key_template: event.keyTemplate, outcome: event.outcome }, event.durationMs / 1000);
          break;
        case 'renewed':
          heartbeatLatency.observe(event.latencyMs / 1000);
          break;
        case 'renew-failed':
          renewFailures.inc();
          break;
        case 'elected':
          leader.set({ key_template: event.keyTemplate }, 1);
          break;
        case 'revoked':
          leader.set({ key_template: event.keyTemplate }, 0);
          break;
        case 'wait-ended':
          waits.inc({ outcome: event.outcome, key_template: event.keyTemplate });
          waitDuration.observe({ key_template: event.keyTemplate, outcome: event.outcome }, event.waitedMs / 1000);
          break;
      }
    });
  }

  /** Stops counting and unregisters the metrics, so another `LeaseMetrics` may use the same registry. */
  close(): void {
    this.subscription.unsubscribe();
    for (const name of this.names) this.registry.removeSingleMetric(name);
  }

  onModuleDestroy(): void {
    this.close();
  }
}

/**
 * Registers `LeaseMetrics` for the application's `LeaseService` (import `LeaseModule` too). Expose the registry
 * yourself, e.g. a controller answering `GET /metrics` with `await metrics.registry.metrics()`.
 *
 * @example LeaseMetricsModule.forRoot({ registry: new Registry() })
 */
@Module({})
export class LeaseMetricsModule {
  static forRoot(options: LeaseMetricsOptions = {}): DynamicModule {
    return {
      module: LeaseMetricsModule,
      providers: [
        {
          provide: LeaseMetrics,
          inject: [LeaseService],
          useFactory: (leases: LeaseService) => new LeaseMetrics(leases, options),
        },
      ],
      exports: [LeaseMetrics],
    };
  }
}
