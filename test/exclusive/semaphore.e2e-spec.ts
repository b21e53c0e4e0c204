/**
 * `@Exclusive(key, { limit })` (issue 30): up to `limit` calls of one key run at once, on controllers (the next
 * answers 409) and on providers (`onBusy: 'skip'` skips it; `onBusy: 'wait'` waits for a slot).
 */
import { Controller, Inject, Injectable, Param, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { CurrentLease, Exclusive, type Lease, LeaseConfigError, LeaseModule, leaseEntities } from 'nest-pg-lease';
import { eventually, FAST, useTestDatabase } from '../support/db.js';
import { Gate, post, startApp } from './fixtures.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

let gate = new Gate();

@Injectable()
class Exports {
  running = 0;

  @Exclusive('export:{0}', { limit: 2, onBusy: 'skip' })
  async skipping(user: string): Promise<string> {
    this.running++;
    await gate.opened;
    this.running--;
    return user;
  }

  @Exclusive('queued:{0}', { limit: 2, priority: 1, onBusy: { wait: { timeoutMs: 20_000 } } })
  async waiting(user: string): Promise<string> {
    this.running++;
    await gate.opened;
    this.running--;
    return user;
  }
}

@Controller()
class ExportsController {
  constructor(@Inject(Exports) private readonly exports: Exports) {}

  @Post('exports/:user')
  @Exclusive('report:{user}', { limit: 2 })
  async start(@Param('user') user: string, @CurrentLease() lease: Lease) {
    await gate.opened;
    return { user, slot: lease.slot };
  }
}

describe('@Exclusive with limit', () => {
  const db = useTestDatabase('exclusive_semaphore');
  let url: string;
  let exports: Exports;
  let close: () => Promise<void>;

  beforeAll(async () => {
    const started = await startApp(
      [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        LeaseModule.forRoot(mergeLeaseOptions(FAST, { tables: { createSchema: true } })),
      ],
      [ExportsController],
      [Exports],
    );
    url = started.url;
    exports = started.app.get(Exports);
    close = () => started.app.close();
  });
  afterAll(() => close());
  beforeEach(() => {
    gate = new Gate();
  });

  const heldSlots = async (key: string) =>
    (
      await db.admin.query(
        `SELECT count(*)::int AS n FROM job_lease WHERE target_id = $1 AND slot > 0 AND lease_token IS NOT NULL`,
        [key],
      )
    ).rows[0].n as number;

  test('a handler: two requests run, the third answers 409; each lease is a slot', async () => {
    const first = post(`${url}/exports/7`);
    const second = post(`${url}/exports/7`);
    await eventually(
      () => heldSlots('report:7'),
      (n) => n === 2,
      'two slots held',
    );
    const third = await post(`${url}/exports/7`);
    expect(third.status).toBe(409);
    expect(third.retryAfter).not.toBeNull();
    // Said as it is: the slots are full (not "busy" as a single holder's key), still a LeaseBusyError's answer.
    expect(third.body).toMatchObject({ code: 'LeaseBusyError', targetKey: 'report:7' });
    expect(third.body.message).toMatch(/^All 2 slots of "report:7" are in use\. Try again in \d+ s/);
    gate.release();
    const answers = await Promise.all([first, second]);
    expect(answers.map((answer) => answer.status)).toEqual([201, 201]);
    expect(answers.map((answer) => answer.body.slot).sort()).toEqual([0, 1]);
  });

  test('a provider: the third call skips with onBusy "skip", or waits for a slot with a priority', async () => {
    const runs = [exports.skipping('u'), exports.skipping('u')];
    await eventually(
      () => heldSlots('export:u'),
      (n) => n === 2,
      'two slots held',
    );
    await expect(exports.skipping('u')).resolves.toBeUndefined();
    const queued = [exports.waiting('v'), exports.waiting('v'), exports.waiting('v')];
    await eventually(
      () => heldSlots('queued:v'),
      (n) => n === 2,
      'two slots held',
    );
    expect(exports.running).toBe(4);
    gate.release();
    await expect(Promise.all(runs)).resolves.toEqual(['u', 'u']);
    await expect(Promise.all(queued)).resolves.toEqual(['v', 'v', 'v']);
  });

  test('declaration errors: a limit out of range, or a semaphore that joins or preempts (JavaScript: no types)', () => {
    expect(() => Exclusive('k', { limit: 0 })).toThrow(LeaseConfigError);
    expect(() => Exclusive('k', { limit: 2, onBusy: 'join' } as never)).toThrow(LeaseConfigError);
    expect(() => Exclusive('k', { limit: 2, onBusy: 'preempt' } as never)).toThrow(LeaseConfigError);
  });
});
