import { Controller, type INestApplication, type LoggerService, Module, Param, Post, Query } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  Exclusive,
  LeaseArgumentError,
  LeaseBusyError,
  LeaseConfigError,
  LeaseModule,
  LeaseService,
  type RetryAfterContext,
} from 'nest-pg-lease';
import { eventually, useTestDatabase } from '../support/db.js';
import { Gate, post } from './fixtures.js';

// What an HTTP client is told when the key is busy (issue 41): `Retry-After` says when the key is likely free — the
// holder's expected remaining time, from the key's recent holds in this process or its hold tail — not the heartbeat
// interval whatever the job's length; the body says what happened and when to retry, and the advice for the
// developer (which option would have waited) goes to the log, once per key per period, not to the client.
// The module's default timings: a heartbeat every 30 s, which is what Retry-After answered before.

const gates = new Map<string, Gate>();
const gate = (name: string) => gates.get(name) ?? gates.set(name, new Gate()).get(name)!;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A job of 1.5 s, or one that waits for the test's gate. */
@Controller()
class JobController {
  @Post('jobs/:id')
  @Exclusive('job:{id}')
  async job(@Param('id') id: string, @Query('gate') gateName?: string) {
    if (gateName) {
      gate(gateName).entered += 1;
      await gate(gateName).opened;
    } else await sleep(1_500);
    return { id };
  }

  /** Finishes at once; the key stays taken for 4 s after the acquisition. */
  @Post('ticks/:id')
  @Exclusive('tick:{id}', { holdAtLeastMs: 4_000 })
  tick(@Param('id') id: string) {
    return { id };
  }

  @Post('fresh/:id')
  @Exclusive('fresh:{id}')
  fresh(@Param('id') id: string) {
    return { id };
  }

  @Post('fixed/:id')
  @Exclusive('fixed:{id}', { retryAfterMs: 7_000 })
  fixed(@Param('id') id: string) {
    return { id };
  }

  @Post('scaled/:id')
  @Exclusive('scaled:{id}', { retryAfterMs: ({ estimatedMs }) => 3 * estimatedMs })
  scaled(@Param('id') id: string) {
    return { id };
  }

  /** Waits at most 300 ms in line. */
  @Post('queued/:id')
  @Exclusive('job:{id}', { onBusy: { wait: { timeoutMs: 300 } } })
  queued(@Param('id') id: string) {
    return { id };
  }
}

/** Every log line the app writes, by level. */
class CapturingLogger implements LoggerService {
  readonly lines: { level: string; message: string; context?: string }[] = [];
  log = (message: unknown, context?: string) => this.push('log', message, context);
  warn = (message: unknown, context?: string) => this.push('warn', message, context);
  error = (message: unknown, ...rest: unknown[]) => this.push('error', message, rest.at(-1) as string);
  debug = (message: unknown, context?: string) => this.push('debug', message, context);
  verbose = (message: unknown, context?: string) => this.push('verbose', message, context);
  private push(level: string, message: unknown, context?: string) {
    this.lines.push({ level, message: String(message), context });
  }
}

/** Developer advice: the options and methods that would have waited, raised a bound, or pointed elsewhere. */
const ADVICE = /onBusy|acquire\(\)|timeoutMs|defaultWaitTimeoutMs|priority|wait in line/;

describe('client-facing answers of a busy key over HTTP', () => {
  const db = useTestDatabase('client_answers');
  const logger = new CapturingLogger();
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    @Module({
      imports: [
        LeaseModule.forRoot({
          connections: { dataSource: { type: 'postgres', url: db.url } },
          tables: { createSchema: true },
        }),
      ],
      controllers: [JobController],
    })
    class ClientAnswersApp {}
    app = await NestFactory.create(ClientAnswersApp, { logger });
    await app.listen(0, '127.0.0.1');
    url = await app.getUrl();
  });

  db.beforeDrop(async () => {
    await app?.close();
  });

  /** A request while `id`'s job holds its key (its gate closed), then the gate opened. */
  async function refusedWhileHeld(id: string) {
    const name = `${id}:${Math.random()}`;
    const running = post(`${url}/jobs/${id}?gate=${name}`);
    await eventually(
      () => gate(name).entered,
      (n) => n === 1,
      `the job ${id} to hold its key`,
    );
    const refused = await post(`${url}/jobs/${id}`);
    gate(name).release();
    expect((await running).status).toBe(201);
    return refused;
  }

  test('a 1.5 s job: Retry-After is its expected remaining time (≤ 2 s), not the 30 s heartbeat', async () => {
    // One run of the key in this process: its hold lasted about 1.5 s.
    expect((await post(`${url}/jobs/1`)).status).toBe(201);
    const refused = await refusedWhileHeld('1');
    expect(refused.status).toBe(409);
    expect(Number(refused.retryAfter)).toBeGreaterThanOrEqual(1);
    expect(Number(refused.retryAfter)).toBeLessThanOrEqual(2);
    expect(refused.body.retryAfterSeconds).toBe(Number(refused.retryAfter));
    // Another key of the same template, never run here: the template's holds tell the same.
    const other = await refusedWhileHeld('2');
    expect(Number(other.retryAfter)).toBeLessThanOrEqual(2);
  });

  test('a key free but for its hold tail: Retry-After is what is left of the tail (4 s hold)', async () => {
    expect((await post(`${url}/ticks/1`)).status).toBe(201);
    const refused = await post(`${url}/ticks/1`);
    expect(refused.status).toBe(409);
    expect(Number(refused.retryAfter)).toBeGreaterThanOrEqual(2);
    expect(Number(refused.retryAfter)).toBeLessThanOrEqual(4);
  });

  test('a key nothing is known about (held by another process, its template never held here): 5 s', async () => {
    const otherProcess = await db.open();
    const held = await otherProcess.service.tryAcquire('fresh:1');
    expect(held).not.toBeNull();
    const refused = await post(`${url}/fresh/1`);
    expect(refused.status).toBe(409);
    expect(refused.retryAfter).toBe('5');
    await held!.release();
  });

  test('409 body: what happened and when to retry, no developer advice; the advice is logged once per key', async () => {
    const before = logger.lines.length;
    const answers = [await refusedWhileHeld('3'), await refusedWhileHeld('3'), await refusedWhileHeld('3')];
    for (const answer of answers) {
      expect(answer.status).toBe(409);
      expect(answer.body.message).not.toMatch(ADVICE);
      expect(answer.body.message).toMatch(/"job:3" is busy.*[Tt]ry again in \d+ s/);
      expect(answer.body.message).toContain(`in ${answer.retryAfter} s`);
    }
    const advice = logger.lines.slice(before).filter((line) => /job:3/.test(line.message) && ADVICE.test(line.message));
    expect(advice).toHaveLength(1);
    expect(advice[0].message).toMatch(/onBusy: 'wait'/);
  });

  test('503 body of a wait that timed out: no advice to raise a bound; the advice is logged', async () => {
    const before = logger.lines.length;
    const name = `wait:${Math.random()}`;
    const running = post(`${url}/jobs/4?gate=${name}`);
    await eventually(
      () => gate(name).entered,
      (n) => n === 1,
      'the job 4 to hold its key',
    );
    const timedOut = await post(`${url}/queued/4`);
    gate(name).release();
    await running;
    expect(timedOut.status).toBe(503);
    expect(timedOut.body.message).not.toMatch(ADVICE);
    expect(timedOut.body.message).toMatch(/[Tt]ry again in \d+ s/);
    const advice = logger.lines.slice(before).filter((line) => /job:4/.test(line.message) && ADVICE.test(line.message));
    expect(advice).toHaveLength(1);
  });

  test('retryAfterMs per decorator (a number, a function of the estimate) and per run() call', async () => {
    const otherProcess = await db.open();
    const held = await Promise.all(['fixed:1', 'scaled:1', 'run:1'].map((key) => otherProcess.service.tryAcquire(key)));
    expect(held.every((lease) => lease !== null)).toBe(true);
    const fixed = await post(`${url}/fixed/1`);
    expect({ status: fixed.status, retryAfter: fixed.retryAfter }).toEqual({ status: 409, retryAfter: '7' });
    expect(fixed.body.message).toContain('Try again in 7 s');
    // Nothing known of scaled:{id} here: the estimate is the default, 5 s, tripled.
    const scaled = await post(`${url}/scaled/1`);
    expect({ status: scaled.status, retryAfter: scaled.retryAfter }).toEqual({ status: 409, retryAfter: '15' });
    const leases = app.get(LeaseService);
    const seen: RetryAfterContext[] = [];
    const refused = await leases
      .run('run:1', () => 'ran', {
        retryAfterMs: (context) => {
          seen.push(context);
          return 2_500;
        },
      })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(LeaseBusyError);
    expect((refused as LeaseBusyError).retryAfterMs).toBe(2_500);
    expect(seen).toEqual([{ targetKey: 'run:1', estimatedMs: 5_000 }]);
    const plain = await leases.run('run:1', () => 'ran', { retryAfterMs: 1_200 }).catch((error: unknown) => error);
    expect((plain as LeaseBusyError).retryAfterMs).toBe(1_200);
    await Promise.all(held.map((lease) => lease!.release()));
  });

  test('retryAfterMs that is not a duration or a function: refused at decoration and per call', async () => {
    expect(() => Exclusive('k', { retryAfterMs: -1 })).toThrow(LeaseConfigError);
    expect(() => Exclusive('k', { retryAfterMs: -1 })).toThrow(
      /@Exclusive retryAfterMs must be a non-negative integer/,
    );
    const leases = app.get(LeaseService);
    const run = leases.run('k', () => 1, { retryAfterMs: '5' as unknown as number });
    await expect(run).rejects.toThrow(LeaseArgumentError);
    await expect(leases.run('k', () => 1, { retryAfterMs: 1.5 })).rejects.toThrow(
      /retryAfterMs must be a non-negative/,
    );
    // tryAcquire and acquire never refuse with a LeaseBusyError: they do not take it.
    const tryAcquire = leases.tryAcquire('k', { retryAfterMs: 1 } as never);
    await expect(tryAcquire).rejects.toThrow(/tryAcquire\(\): unknown option "retryAfterMs"/);
  });
});
