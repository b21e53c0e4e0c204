import { Controller, Injectable, Param, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  CurrentLease,
  Exclusive,
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

/** What the preempted work saw, by key: its signal's reason, and whether its fenced write got through. */
const seen = new Map<string, { told?: string; wrote?: string; reason?: string; refusal?: string }>();

@Controller()
class RebuildController {
  @Post('rebuild/:id')
  @Exclusive('rebuild:{id}', { priority: 0, onBusy: 'wait' })
  async rebuild(@Param('id') id: string, @CurrentLease() lease: Lease) {
    const g = gate(id);
    g.entered += 1;
    // Ignores its signal: it goes on to its write after being told, which is refused.
    await g.opened;
    const record = seen.get(id) ?? {};
    record.told = (lease.signal.reason as { reason?: string } | undefined)?.reason;
    record.wrote = await lease
      .fenced(async () => 'saved')
      .catch((error: Error & { reason?: string }) => {
        record.reason = error.reason;
        record.refusal = error.message;
        return error.name;
      });
    seen.set(id, record);
    return { id, fencingToken: String(lease.fencingToken) };
  }

  @Post('rebuild/:id/urgent')
  @Exclusive('rebuild:{id}', { priority: 10, onBusy: { preempt: { graceMs: 5_000 } } })
  urgent(@Param('id') id: string, @CurrentLease() lease: Lease) {
    return { id, urgent: true, fencingToken: String(lease.fencingToken) };
  }
}

@Injectable()
class Nightly {
  constructor(private readonly leases: LeaseService) {}

  @Exclusive('nightly', { priority: 1, onBusy: { preempt: { graceMs: 200 } } })
  async run() {
    return String(this.leases.current()?.fencingToken);
  }
}

/** Preemption through @Exclusive: an urgent HTTP request takes the key from a running one of lower priority. */
describe('@Exclusive with preempt: true', () => {
  const db = useTestDatabase('preempt_http');
  let url: string;
  let close: () => Promise<void>;
  let leases: LeaseService;
  let nightly: Nightly;

  beforeAll(async () => {
    const started = await startApp(
      [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        // Roomy leases: the running holder must lose its lease to the preemption, not to a late renewal (1 s leases
        // expired on a loaded machine in a full run: "renewal-deadline"). Nothing here waits for an expiry.
        LeaseModule.forRoot(
          mergeLeaseOptions(FAST, {
            timing: { heartbeatIntervalMs: 250, leaseTimeoutMs: 5_000 },
            tables: { createSchema: true },
          }),
        ),
      ],
      [RebuildController],
      [Nightly],
    );
    url = started.url;
    close = () => started.app.close();
    leases = started.app.get(LeaseService);
    nightly = started.app.get(Nightly);
  });

  afterAll(async () => {
    await close?.();
  });

  test('the urgent request answers 201 with a higher token; the running one answers 409 preempted, never saves', async () => {
    const events: LeaseEvent[] = [];
    const sub = leases.events$.subscribe((event) => events.push(event));
    const running = post(`${url}/rebuild/r1`);
    await eventually(
      () => gate('r1').entered,
      (n) => n === 1,
      'the running rebuild to hold the lease',
    );
    const urgent = await post(`${url}/rebuild/r1/urgent`);
    const preempted = await running;
    sub.unsubscribe();
    expect(urgent.status).toBe(201);
    expect(preempted.status).toBe(409);
    expect(preempted.body).toMatchObject({ reason: 'preempted', discarded: true, targetKey: 'rebuild:r1' });
    const event = events.find((e): e is Extract<LeaseEvent, { type: 'preempted' }> => e.type === 'preempted')!;
    expect(event).toMatchObject({ targetKey: 'rebuild:r1', priority: 10, previousPriority: 0, forced: false });
    expect(BigInt(urgent.body.fencingToken)).toBe(event.fencingToken);
    expect(event.fencingToken > event.previousFencingToken).toBe(true);
    // The preempted handler's work goes on after its answer; its write is refused.
    gate('r1').release();
    await eventually(
      () => seen.get('r1'),
      (record) => record?.wrote !== undefined,
      'the preempted work to try its write',
    );
    // Its lease was released when the handler answered 409: the refusal still says why it was lost.
    expect(seen.get('r1')).toMatchObject({ told: 'preempted', wrote: 'LeaseLostError', reason: 'preempted' });
    expect(seen.get('r1')?.refusal).toMatch(
      /^Lease on "rebuild:r1" was lost \(a caller of higher priority preempted it\)/,
    );
  });

  test('a provider method preempts a holder of lower priority', async () => {
    const holder = await leases.acquire('nightly', { priority: 0 });
    holder.signal.addEventListener('abort', () => void holder.release(), { once: true });
    const token = BigInt(await nightly.run());
    expect(token > holder.fencingToken).toBe(true);
    expect(holder.isHeld()).toBe(false);
  });
});
