import { Body, Controller, Get, Headers, Inject, Injectable, Param, Post, Query } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  CurrentLease,
  Exclusive,
  LeaseBusyError,
  LeaseModule,
  LeaseService,
  leaseEntities,
  type Lease,
  type LeaseEvent,
} from 'nest-pg-lease';
import { eventually, FAST, useTestDatabase } from '../support/db.js';
import { Gate, post, startApp } from './fixtures.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

const gates = new Map<string, Gate>();
const gate = (name: string) => gates.get(name) ?? gates.set(name, new Gate()).get(name)!;
const stealSql = `UPDATE job_lease SET lease_token = gen_random_uuid(), fencing_token = nextval('job_lease_fencing_seq'), owner = 'thief'
  WHERE target_id = $1 RETURNING fencing_token::text`;

@Injectable()
class ReportService {
  calls = 0;
  constructor(@Inject(LeaseService) private readonly leases: LeaseService) {}

  @Exclusive('svc:{id}')
  async build(input: { id: string; gate: string }): Promise<string> {
    this.calls += 1;
    const g = gate(input.gate);
    g.entered += 1;
    await g.opened;
    return `built ${input.id} with ${this.leases.current()?.fencingToken}`;
  }

  /** Same key as the controller's lease: reentrant. */
  @Exclusive('report:{0}')
  async nested(id: string): Promise<bigint | undefined> {
    return this.leases.current()?.fencingToken;
  }
}

@Injectable()
class OtherCaller {
  constructor(@Inject(ReportService) private readonly reports: ReportService) {}
  call(id: string, gateName: string) {
    return this.reports.build({ id, gate: gateName });
  }
}

@Controller()
class ReportController {
  constructor(
    @Inject(ReportService) private readonly reports: ReportService,
    @Inject(LeaseService) private readonly leases: LeaseService,
  ) {}

  @Post('reports/:id')
  @Exclusive('report:{id}')
  async build(@Param('id') id: string, @Query('gate') gateName: string, @CurrentLease() lease: Lease) {
    const g = gate(gateName);
    g.entered += 1;
    await g.opened;
    return { id, fencingToken: lease.fencingToken.toString(), same: this.leases.current() === lease };
  }

  @Post('svc/:id')
  svc(@Param('id') id: string, @Query('gate') gateName: string) {
    return this.reports.build({ id, gate: gateName });
  }

  @Post('nested/:id')
  @Exclusive('report:{id}')
  async nested(@Param('id') id: string, @CurrentLease() lease: Lease) {
    const inner = await this.reports.nested(id);
    return { outer: lease.fencingToken.toString(), inner: String(inner) };
  }

  @Post('by-body')
  @Exclusive('order:{order.id}')
  byBody(@Body() body: unknown) {
    return { ok: true, body };
  }

  @Post('by-fn')
  @Exclusive((tenant: string) => `tenant:${tenant}`)
  byFunction(@Headers('x-tenant') tenant: string) {
    return { ok: true, tenant };
  }

  /** Waits for the external call (signal-aware), then saves fenced. */
  @Post('slow/:id')
  @Exclusive('slow:{id}')
  async slow(@Param('id') id: string, @CurrentLease() lease: Lease) {
    const g = gate(`slow:${id}`);
    g.entered += 1;
    await new Promise<void>((resolve) => {
      lease.signal.addEventListener('abort', () => resolve());
      void g.opened.then(() => resolve());
    });
    await lease.fenced((manager) =>
      manager.query(`INSERT INTO job_result VALUES ($1, $2)`, [id, lease.fencingToken.toString()]),
    );
    return { saved: true };
  }

  @Post('queued/:id')
  @Exclusive('queued:{id}', { priority: 1, onBusy: { wait: { timeoutMs: 10_000 } } })
  async queued(@Param('id') id: string, @Query('gate') gateName: string, @CurrentLease() lease: Lease) {
    const g = gate(gateName);
    g.entered += 1;
    await g.opened;
    return { fencingToken: lease.fencingToken.toString() };
  }

  @Get('current')
  current() {
    return { current: this.leases.current() ?? null };
  }
}

describe('@Exclusive over HTTP', () => {
  const db = useTestDatabase('http');
  let url: string;
  let close: () => Promise<void>;
  let leases: LeaseService;
  let reports: ReportService;
  let other: OtherCaller;
  const events: LeaseEvent[] = [];

  beforeAll(async () => {
    await db.admin.query('CREATE TABLE job_result (target_id text, fencing_token bigint)');
    const started = await startApp(
      [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        // Heartbeats every second: a test can steal a row without racing a renewal.
        LeaseModule.forRoot(
          mergeLeaseOptions(FAST, {
            timing: { heartbeatIntervalMs: 1_000, leaseTimeoutMs: 3_000 },
            tables: { createSchema: true },
          }),
        ),
      ],
      [ReportController],
      [ReportService, OtherCaller],
    );
    url = started.url;
    close = () => started.app.close();
    leases = started.app.get(LeaseService);
    reports = started.app.get(ReportService);
    other = started.app.get(OtherCaller);
    leases.events$.subscribe((event) => events.push(event));
  });

  db.beforeDrop(async () => {
    await close();
  });

  const leaseRows = async () =>
    Number((await db.admin.query('SELECT count(*) FROM job_lease WHERE lease_token IS NOT NULL')).rows[0].count);

  test('20 concurrent POSTs with the same id: exactly one 2xx, the rest 409 with Retry-After naming the target', async () => {
    const g = gate('same');
    const requests = Array.from({ length: 20 }, () => post(`${url}/reports/42?gate=same`));
    // The 19 refusals answer while the winner still holds the lease; then the test opens the gate.
    const answers: Array<Awaited<ReturnType<typeof post>>> = [];
    const tracked = requests.map((request) => request.then((answer) => (answers.push(answer), answer)));
    await eventually(
      () => answers.length,
      (n) => n === 19,
      '19 refusals',
    );
    expect(g.entered).toBe(1);
    g.release();
    await Promise.all(tracked);
    const ok = answers.filter((answer) => answer.status === 201);
    const conflicts = answers.filter((answer) => answer.status === 409);
    expect(ok).toHaveLength(1);
    expect(conflicts).toHaveLength(19);
    for (const conflict of conflicts) {
      expect(Number(conflict.retryAfter)).toBeGreaterThanOrEqual(1);
      expect(conflict.body).toMatchObject({ statusCode: 409, code: 'LeaseBusyError', targetKey: 'report:42' });
    }
    expect(ok[0].body).toMatchObject({ id: '42', same: true });
    expect(await leaseRows()).toBe(0); // released before the response went out
  });

  test('20 concurrent POSTs with different ids: all 2xx', async () => {
    const g = gate('different');
    const requests = Array.from({ length: 20 }, (_, i) => post(`${url}/reports/d${i}?gate=different`));
    await eventually(
      () => g.entered,
      (n) => n === 20,
      'all 20 handlers to hold their lease',
    );
    expect(await leaseRows()).toBe(20);
    g.release();
    const answers = await Promise.all(requests);
    expect(answers.map((answer) => answer.status)).toEqual(Array(20).fill(201));
    const tokens = new Set(answers.map((answer) => answer.body.fencingToken));
    expect(tokens.size).toBe(20);
  });

  test('a controller handler is acquired once per request (interceptor only, never the explorer too)', async () => {
    const before = events.filter((event) => event.type === 'acquired' && event.targetKey === 'report:once').length;
    gate('once').release();
    expect((await post(`${url}/reports/once?gate=once`)).status).toBe(201);
    const after = events.filter((event) => event.type === 'acquired' && event.targetKey === 'report:once').length;
    expect(after - before).toBe(1);
  });

  test('a decorated service method called concurrently from a controller and from another provider: one runs, the other is refused', async () => {
    const g = gate('svc');
    const viaHttp = post(`${url}/svc/7?gate=svc`);
    await eventually(
      () => g.entered,
      (n) => n === 1,
      'the HTTP call to hold the lease',
    );
    await expect(other.call('7', 'svc')).rejects.toBeInstanceOf(LeaseBusyError);
    await expect(reports.build({ id: '7', gate: 'svc' })).rejects.toBeInstanceOf(LeaseBusyError);
    g.release();
    const answer = await viaHttp;
    expect(answer.status).toBe(201);
    expect(answer.body).toMatch(/^built 7 with \d+$/);
    // Free again: the provider-side call runs now (gate already open).
    await expect(other.call('7', 'svc')).resolves.toMatch(/^built 7/);
  });

  test('a handler whose lease is taken over mid-call: its signal aborts, its save writes nothing, the client gets 409 "discarded"', async () => {
    const answer = post(`${url}/slow/1`);
    await eventually(
      () => gate('slow:1').entered,
      (n) => n === 1,
      'the handler to start its slow call',
    );
    const stolen = await db.admin.query(stealSql, ['slow:1']);
    expect(stolen.rows).toHaveLength(1);
    const result = await answer;
    expect(result.status).toBe(409);
    expect(result.body).toMatchObject({
      error: 'Lease Lost',
      code: 'LeaseLostError',
      discarded: true,
      targetKey: 'slow:1',
    });
    expect(result.body.message).toMatch(/was interrupted before it completed \(another instance took it over\)/);
    // Give the handler time to try its fenced save after the abort: it must be refused.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect((await db.admin.query(`SELECT count(*)::int AS n FROM job_result WHERE target_id = '1'`)).rows[0].n).toBe(0);
    expect(events.some((event) => event.type === 'lost' && event.targetKey === 'slow:1')).toBe(true);
    await db.admin.query(`DELETE FROM job_lease WHERE target_id = 'slow:1'`);
  });

  test('an undisturbed slow handler saves with its fencing token', async () => {
    const answer = post(`${url}/slow/2`);
    await eventually(
      () => gate('slow:2').entered,
      (n) => n === 1,
      'the handler to start',
    );
    gate('slow:2').release();
    expect((await answer).status).toBe(201);
    expect((await db.admin.query(`SELECT count(*)::int AS n FROM job_result WHERE target_id = '2'`)).rows[0].n).toBe(1);
  });

  test('reentrant: a decorated service method on the same key inside a decorated handler reuses the lease', async () => {
    const answer = await post(`${url}/nested/5`);
    expect(answer.status).toBe(201);
    expect(answer.body.inner).toBe(answer.body.outer);
  });

  test('key templates: body fields with dotted paths, functions of the handler arguments; a missing placeholder is a 400', async () => {
    expect((await post(`${url}/by-body`, { order: { id: 9 } })).status).toBe(201);
    const missing = await post(`${url}/by-body`, { other: 1 });
    expect(missing.status).toBe(400);
    expect(missing.body).toMatchObject({ code: 'LeaseKeyError' });
    expect(missing.body.message).toMatch(/\{order\.id\} resolved to nothing/);
    const byFunction = await fetch(`${url}/by-fn`, { method: 'POST', headers: { 'x-tenant': 'acme' } });
    expect(byFunction.status).toBe(201);
    expect(events.some((event) => event.type === 'acquired' && event.targetKey === 'tenant:acme')).toBe(true);
    expect(await leaseRows()).toBe(0);
  });

  test('outside a lease, current() is undefined', async () => {
    const answer = await fetch(`${url}/current`);
    expect(await answer.json()).toEqual({ current: null });
  });

  test('with a priority the second request waits its turn instead of being refused', async () => {
    const first = gate('q1');
    const a = post(`${url}/queued/1?gate=q1`);
    await eventually(
      () => first.entered,
      (n) => n === 1,
      'the first to hold',
    );
    gate('q2').release();
    const b = post(`${url}/queued/1?gate=q2`);
    await eventually(
      () => db.admin.query(`SELECT count(*)::int AS n FROM job_lease_waiter WHERE target_id = 'queued:1'`),
      (result) => result.rows[0].n === 1,
      'the second to queue',
    );
    first.release();
    const [ra, rb] = await Promise.all([a, b]);
    expect(ra.status).toBe(201);
    expect(rb.status).toBe(201);
    expect(BigInt(rb.body.fencingToken)).toBeGreaterThan(BigInt(ra.body.fencingToken));
  });
});
