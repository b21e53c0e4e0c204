import { Controller, Get, Param } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { context, type Span, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { firstValueFrom } from 'rxjs';
import { filter } from 'rxjs/operators';
import { CurrentLease, Exclusive, type Lease, LeaseModule, LeaseService, leaseEntities } from 'nest-pg-lease';
import { FAST, useTestDatabase } from '../support/db.js';
import { Gate, startApp } from '../exclusive/fixtures.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

// The library's spans, recorded by the real OpenTelemetry SDK (in-memory exporter): their tree under the caller's
// span (an HTTP request's, made by a middleware as an HTTP instrumentation would), names, attributes and events.

const db = useTestDatabase('tracing');
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const contextManager = new AsyncLocalStorageContextManager();
const tracer = () => trace.getTracer('test');

beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
  trace.setGlobalTracerProvider(provider);
});
afterAll(async () => {
  trace.disable();
  context.disable();
  await provider.shutdown();
});
beforeEach(() => exporter.reset());

const spans = (name: string) => exporter.getFinishedSpans().filter((span) => span.name === name);
const one = (name: string, where: (span: ReadableSpan) => boolean = () => true) => {
  const found = spans(name).filter(where);
  expect(found).toHaveLength(1);
  return found[0];
};
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId;
const idOf = (span: ReadableSpan | Span) => ('spanContext' in span ? span.spanContext().spanId : undefined);
/** Runs `work` inside a span of the test's, as a caller's code would. */
const inSpan = async <T>(name: string, work: (span: Span) => Promise<T>): Promise<T> =>
  tracer().startActiveSpan(name, async (span) => {
    try {
      return await work(span);
    } finally {
      span.end();
    }
  });

const gates = new Map<string, Gate>();
const gate = (name: string) => gates.get(name) ?? gates.set(name, new Gate()).get(name)!;

@Controller()
class ReportController {
  @Get('reports/:id/:gate')
  @Exclusive('report:{id}', { priority: 5, onBusy: { wait: { timeoutMs: 10_000 } } })
  async build(@Param('id') id: string, @Param('gate') gateName: string, @CurrentLease() lease: Lease) {
    const g = gate(gateName);
    g.entered += 1;
    await g.opened;
    await lease.fenced((manager) => manager.query('SELECT 1'));
    return { id, fencingToken: lease.fencingToken.toString() };
  }
}

describe('OpenTelemetry spans', () => {
  test('a decorated handler inside an HTTP span: acquire, wait in line, fenced, release are its children', async () => {
    const { app, url } = await startApp(
      [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: leaseEntities }),
        LeaseModule.forRoot(mergeLeaseOptions(FAST, { tables: { createSchema: true } })),
      ],
      [ReportController],
      [],
      (nest) =>
        nest.use((req: { method: string; url: string }, res: { on: Function }, next: () => void) => {
          // What an HTTP instrumentation does: the request's span is the active span while Nest handles it.
          const span = tracer().startSpan(`HTTP ${req.method}`, { attributes: { 'url.path': req.url } });
          res.on('finish', () => span.end());
          context.with(trace.setSpan(context.active(), span), next);
        }),
    );
    try {
      const first = fetch(`${url}/reports/42/first`);
      while (gate('first').entered === 0) await new Promise((resolve) => setTimeout(resolve, 10));
      const leases = app.get(LeaseService);
      const waiting = firstValueFrom(leases.events$.pipe(filter((event) => event.type === 'waiting')));
      const second = fetch(`${url}/reports/42/second`);
      await waiting;
      gate('first').release();
      gate('second').release();
      const [a, b] = await Promise.all([first, second]);
      expect([a.status, b.status]).toEqual([200, 200]);
      const tokens = [(await a.json()).fencingToken, (await b.json()).fencingToken];
      // The second request's answer may come before its span ends (res 'finish'): wait for both HTTP spans.
      while (spans('HTTP GET').length < 2) await new Promise((resolve) => setTimeout(resolve, 10));

      const http = (gateName: string) =>
        one('HTTP GET', (span) => span.attributes['url.path'] === `/reports/42/${gateName}`);
      const [httpA, httpB] = [http('first'), http('second')];
      const under = (name: string, parent: ReadableSpan) =>
        one(name, (span) => parentOf(span) === parent.spanContext().spanId);

      // First request: acquired at once, no wait.
      const acquireA = under('lease.acquire', httpA);
      expect(acquireA.instrumentationScope.name).toBe('nest-pg-lease');
      expect(acquireA.attributes).toMatchObject({
        'lease.key_template': 'report:{id}',
        'lease.priority': 5,
        'lease.outcome': 'acquired',
        'lease.fencing_token': tokens[0],
        'lease.batch_size': 1,
      });
      expect(acquireA.attributes['lease.key']).toBeUndefined();
      expect(spans('lease.wait').filter((span) => parentOf(span) === acquireA.spanContext().spanId)).toEqual([]);

      // Second request: its acquisition waited in line behind the first; the wait span shows how long.
      const acquireB = under('lease.acquire', httpB);
      expect(acquireB.attributes).toMatchObject({ 'lease.outcome': 'acquired', 'lease.fencing_token': tokens[1] });
      const waitB = under('lease.wait', acquireB);
      expect(waitB.attributes).toMatchObject({
        'lease.key_template': 'report:{id}',
        'lease.priority': 5,
        'lease.outcome': 'granted',
        'lease.wait.position': 1,
        'lease.fencing_token': tokens[1],
      });
      const ms = (span: ReadableSpan) => span.duration[0] * 1e3 + span.duration[1] / 1e6;
      expect(ms(acquireB)).toBeGreaterThanOrEqual(ms(waitB));

      for (const [httpSpan, token] of [
        [httpA, tokens[0]],
        [httpB, tokens[1]],
      ] as const) {
        expect(under('lease.fenced', httpSpan).attributes).toMatchObject({
          'lease.outcome': 'committed',
          'lease.fencing_token': token,
          'lease.key_template': 'report:{id}',
        });
        expect(under('lease.release', httpSpan).attributes).toMatchObject({
          'lease.outcome': 'released',
          'lease.fencing_token': token,
        });
      }
      // Every lease span of the request is in the request's trace.
      for (const span of exporter.getFinishedSpans().filter((s) => s.name.startsWith('lease.'))) {
        expect([httpA.spanContext().traceId, httpB.spanContext().traceId]).toContain(span.spanContext().traceId);
      }
    } finally {
      await app.close();
    }
  });

  test('service calls: busy and timeout outcomes, the key only when opted in, losses and failed heartbeats as events', async () => {
    const { service, close } = await db.open({ observability: { traceTargetKeys: true } });
    try {
      const held = await inSpan('job', async (job) => {
        const lease = await service.tryAcquire('job:7', { keyTemplate: 'job:{id}' });
        expect(lease).not.toBeNull();
        expect(await service.tryAcquire('job:7', { keyTemplate: 'job:{id}' })).toBeNull();
        await expect(
          service.acquire('job:7', { keyTemplate: 'job:{id}', onBusy: { wait: { timeoutMs: 200 } } }),
        ).rejects.toThrow(/Gave up waiting/);
        return { lease: lease!, job };
      });
      const parent = idOf(held.job);
      const acquires = spans('lease.acquire');
      expect(acquires.map((span) => span.attributes['lease.outcome'])).toEqual(['acquired', 'busy', 'timeout']);
      for (const span of acquires) {
        expect(parentOf(span)).toBe(parent);
        expect(span.attributes).toMatchObject({ 'lease.key_template': 'job:{id}', 'lease.key': 'job:7' });
      }
      expect(one('lease.wait').attributes['lease.outcome']).toBe('timeout');

      // A span still open while the lease is held collects the heartbeat's failures and the loss as events.
      await inSpan('holding', async (holding) => {
        const lease = await service.tryAcquire('job:8');
        expect(spans('lease.acquire').at(-1)!.attributes['lease.key_template']).toBe('(none)');
        // Once renewed, the lease is in every later batch (a tick in flight now may have started without it).
        await firstValueFrom(
          service.events$.pipe(filter((event) => event.type === 'renewed' && event.targetKey === 'job:8')),
        );
        const failed = firstValueFrom(service.events$.pipe(filter((event) => event.type === 'renew-failed')));
        // The lease table locked by another transaction: the renewal waits past its bound and fails.
        await db.admin.query('BEGIN');
        await db.admin.query('LOCK TABLE job_lease IN ACCESS EXCLUSIVE MODE');
        await failed.finally(() => db.admin.query('ROLLBACK'));
        const lost = firstValueFrom(service.events$.pipe(filter((event) => event.type === 'lost')));
        await db.admin.query("UPDATE job_lease SET lease_token = gen_random_uuid() WHERE target_id = 'job:8'");
        await lost;
        await expect(lease!.fenced(async () => 1)).rejects.toThrow(/lost/i);
        const names = (holding as unknown as ReadableSpan).events.map((event) => event.name);
        expect(names).toContain('lease.renew_failed');
        expect(names).toContain('lease.lost');
        const lostEvent = (holding as unknown as ReadableSpan).events.find((event) => event.name === 'lease.lost')!;
        expect(lostEvent.attributes).toMatchObject({ 'lease.reason': 'taken-over' });
      });
      expect(one('lease.fenced').attributes['lease.outcome']).toBe('lost');
      expect(one('lease.fenced').status.code).toBe(2);
      await held.lease.release();
      expect(one('lease.release').attributes).toMatchObject({
        'lease.outcome': 'released',
        'lease.key': 'job:7',
        'lease.key_template': 'job:{id}',
      });
    } finally {
      await close();
    }
  });

  test('no SDK registered: nothing recorded, nothing fails', async () => {
    trace.disable();
    const { service, close } = await db.open();
    try {
      const lease = await inSpan('untraced', () => service.tryAcquire('quiet:1'));
      await lease!.fenced((manager) => manager.query('SELECT 1'));
      await lease!.release();
      expect(exporter.getFinishedSpans()).toEqual([]);
    } finally {
      await close();
      trace.setGlobalTracerProvider(provider);
    }
  });
});
