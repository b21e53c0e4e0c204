import { Controller, Injectable, NotFoundException, Param, Post, Query } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  CurrentLease,
  Exclusive,
  LeaseJoinedRunError,
  LeaseModule,
  LeaseOperator,
  LeaseService,
  leaseEntities,
  type Lease,
} from 'nest-pg-lease';
import { joinersWaiting, mergeLeaseOptions } from '../../libs/lease/src/internal.js';
import { eventually, FAST, useTestDatabase } from '../support/db.js';
import { Gate, post, startApp } from './fixtures.js';

const gates = new Map<string, Gate>();
const gate = (name: string) => gates.get(name) ?? gates.set(name, new Gate()).get(name)!;

@Injectable()
class ReportBuilder {
  runs = 0;

  @Exclusive('built:{0}', { onBusy: 'join' })
  async build(id: string, @CurrentLease() lease?: Lease): Promise<{ id: string; fencingToken: string }> {
    this.runs += 1;
    await gate(`svc:${id}`).opened;
    return { id, fencingToken: String(lease?.fencingToken) };
  }
}

@Controller()
class ReportController {
  runs = 0;

  @Post('reports/:id')
  @Exclusive('report:{id}', { onBusy: 'join' })
  async build(@Param('id') id: string, @Query('fail') fail: string, @CurrentLease() lease: Lease) {
    this.runs += 1;
    const g = gate(id);
    g.entered += 1;
    await g.opened;
    if (fail === '404') throw new NotFoundException(`no report ${id}`);
    if (fail === 'crash') throw new Error(`internal detail of ${id}`);
    return { id, fencingToken: lease.fencingToken.toString(), run: this.runs };
  }
}

/** onBusy: 'join' through @Exclusive: a provider method, and an HTTP duplicate answering what the original answers. */
describe("@Exclusive with onBusy: 'join'", () => {
  const db = useTestDatabase('join_http');
  let url: string;
  let close: () => Promise<void>;
  let builder: ReportBuilder;
  let leases: LeaseService;

  beforeAll(async () => {
    const started = await startApp(
      [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        LeaseModule.forRoot(mergeLeaseOptions(FAST, { tables: { createSchema: true } })),
      ],
      [ReportController],
      [ReportBuilder],
    );
    url = started.url;
    close = () => started.app.close();
    builder = started.app.get(ReportBuilder);
    leases = started.app.get(LeaseService);
  });

  afterAll(async () => {
    await close?.();
  });

  test('a provider method: the duplicate call gets the running call’s value, the method runs once', async () => {
    const first = builder.build('7');
    const second = builder.build('7');
    gate('svc:7').release();
    const [one, two] = await Promise.all([first, second]);
    expect(two).toEqual(one);
    expect(builder.runs).toBe(1);
  });

  test('a double click: both requests answer 200 with the same body (not 409)', async () => {
    const first = post(`${url}/reports/r1`);
    await eventually(
      () => gate('r1').entered,
      (n) => n === 1,
      'the first request to hold the lease',
    );
    const second = post(`${url}/reports/r1`);
    // The duplicate is waiting for the original's outcome (not answered 409): let the original finish.
    await eventually(
      () => joinersWaiting(leases, 'report:r1'),
      (n) => n === 1,
      'the duplicate to join',
    );
    gate('r1').release();
    const [one, two] = await Promise.all([first, second]);
    expect(one.status).toBe(201);
    expect(two.status).toBe(one.status);
    expect(two.body).toEqual(one.body);
    expect(gate('r1').entered).toBe(1);
  });

  test('a failed original (HttpException): the duplicate answers the same status and body', async () => {
    const first = post(`${url}/reports/r2?fail=404`);
    await eventually(
      () => gate('r2').entered,
      (n) => n === 1,
      'the first request to hold the lease',
    );
    const second = post(`${url}/reports/r2?fail=404`);
    // The duplicate is waiting for the original's outcome (not answered 409): let the original finish.
    await eventually(
      () => joinersWaiting(leases, 'report:r2'),
      (n) => n === 1,
      'the duplicate to join',
    );
    gate('r2').release();
    const [one, two] = await Promise.all([first, second]);
    expect(one.status).toBe(404);
    expect(two.status).toBe(404);
    expect(two.body).toEqual(one.body);
  });

  test('a crashed original (plain Error): both answer 500 and the duplicate leaks no more than the original', async () => {
    const first = post(`${url}/reports/r3?fail=crash`);
    await eventually(
      () => gate('r3').entered,
      (n) => n === 1,
      'the first request to hold the lease',
    );
    const second = post(`${url}/reports/r3?fail=crash`);
    // The duplicate is waiting for the original's outcome (not answered 409): let the original finish.
    await eventually(
      () => joinersWaiting(leases, 'report:r3'),
      (n) => n === 1,
      'the duplicate to join',
    );
    gate('r3').release();
    const [one, two] = await Promise.all([first, second]);
    expect(one.status).toBe(500);
    expect(two.status).toBe(500);
    expect(two.body).toEqual(one.body);
    expect(JSON.stringify(two.body)).not.toContain('internal detail');
    expect(LeaseJoinedRunError).toBeDefined();
  });

  test("a drained key: a duplicate after the run answers 503 (drained), not the earlier run's stored body", async () => {
    const first = post(`${url}/reports/r4`);
    await eventually(
      () => gate('r4').entered,
      (n) => n === 1,
      'the first request to hold the lease',
    );
    gate('r4').release();
    expect((await first).status).toBe(201);
    // The operator drains the key (an incident): the run's outcome is still stored, for joinResultTtlMs.
    const operator = new LeaseOperator(leases);
    await operator.drain('report:r4', { by: 'ops', reason: 'incident' });
    try {
      const again = await post(`${url}/reports/r4`);
      expect(again.status).toBe(503);
      expect(again.retryAfter).not.toBeNull();
      expect(again.body).toMatchObject({ code: 'LeaseDrainedError', drained: 'key', reason: 'incident' });
      expect(gate('r4').entered).toBe(1);
    } finally {
      await operator.undrain('report:r4', { by: 'ops', reason: 'over' });
    }
  });
});
