/**
 * Issue 12, item 1: an `@Exclusive` controller handler's key comes from the values the handler receives (after
 * pipes), from one source per placeholder decided by the handler's signature — never from how a request spells the
 * target, and never from a query string the handler did not ask for.
 */
import {
  Body,
  Controller,
  Get,
  Headers,
  Inject,
  Injectable,
  Module,
  Param,
  ParseIntPipe,
  type PipeTransform,
  Post,
  Query,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  CurrentLease,
  Exclusive,
  type Lease,
  LeaseConfigError,
  LeaseModule,
  LeaseService,
  leaseEntities,
  type LeaseEvent,
  Sticky,
} from 'nest-pg-lease';
import { eventually, FAST, useTestDatabase } from '../support/db.js';
import { Gate, post, startApp } from './fixtures.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

const gates = new Map<string, Gate>();
const gate = (name: string) => gates.get(name) ?? gates.set(name, new Gate()).get(name)!;

@Injectable()
class LowerCasePipe implements PipeTransform<unknown, unknown> {
  transform(value: unknown) {
    return typeof value === 'string' ? value.trim().toLowerCase() : value;
  }
}

@Controller()
class KeysController {
  constructor(@Inject(LeaseService) private readonly leases: LeaseService) {}

  /** `/report/7` and `/report/007` are one user after ParseIntPipe: one key, `report:user:7`. */
  @Get('report/:id')
  @Exclusive('report:user:{id}')
  async report(@Param('id', ParseIntPipe) id: number, @Query('gate') gateName: string, @CurrentLease() lease: Lease) {
    const g = gate(gateName);
    g.entered += 1;
    await g.opened;
    return { id, key: lease.targetKey, current: this.leases.current()?.targetKey };
  }

  /** `{userId}` is a field of the body; a `?userId=` the handler never declared cannot change the key. */
  @Post('reports')
  @Exclusive('report:user:{userId}')
  async create(@Body() body: { userId: number }, @Query('gate') gateName: string, @CurrentLease() lease: Lease) {
    const g = gate(gateName);
    g.entered += 1;
    await g.opened;
    return { key: lease.targetKey, userId: body.userId };
  }

  /** A named body field through a pipe: `" Ann@Example.COM "` and `ann@example.com` are one account. */
  @Post('accounts')
  @Exclusive('account:{email}')
  async account(
    @Body('email', LowerCasePipe) email: string,
    @Query('gate') gateName: string,
    @CurrentLease() lease: Lease,
  ) {
    const g = gate(gateName);
    g.entered += 1;
    await g.opened;
    return { key: lease.targetKey, email };
  }

  /** Declared explicitly, a query value is a source: `@Query('page')`. */
  @Get('pages')
  @Exclusive('page:{page}')
  page(@Query('page', ParseIntPipe) page: number, @CurrentLease() lease: Lease) {
    return { key: lease.targetKey, page };
  }

  /** A function key receives the handler's arguments, after pipes, like a provider's. */
  @Post('tenants/:id')
  @Exclusive((id: number, tenant: string) => `tenant:${tenant}:${id}`)
  tenant(@Param('id', ParseIntPipe) id: number, @Headers('x-tenant') tenant: string, @CurrentLease() lease: Lease) {
    return { key: lease.targetKey };
  }

  /** `{0}` names the first argument, after pipes. */
  @Post('positional/:id')
  @Exclusive('pos:{0}')
  positional(@Param('id', ParseIntPipe) id: number, @CurrentLease() lease: Lease) {
    return { key: lease.targetKey };
  }
}

describe('@Exclusive keys come from the handler arguments after pipes', () => {
  const db = useTestDatabase('keys');
  let url: string;
  let close: () => Promise<void>;
  const events: LeaseEvent[] = [];

  beforeAll(async () => {
    const started = await startApp(
      [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        // Roomy leases: a gated handler holds its lease while the test looks (1 s leases were lost under a
        // loaded machine, and the first answer was a 409). Nothing here waits for an expiry.
        LeaseModule.forRoot(
          mergeLeaseOptions(FAST, {
            timing: { heartbeatIntervalMs: 250, leaseTimeoutMs: 5_000 },
            tables: { createSchema: true },
          }),
        ),
      ],
      [KeysController],
    );
    url = started.url;
    close = () => started.app.close();
    started.app.get(LeaseService).events$.subscribe((event) => events.push(event));
  });

  // A failed expectation must not leave a handler holding its lease for the next test.
  afterEach(() => gates.forEach((g) => g.release()));

  db.beforeDrop(async () => {
    await close();
  });

  const get = async (path: string) => {
    const response = await fetch(`${url}${path}`);
    return { status: response.status, body: await response.json() };
  };

  test('/report/7 and /report/007 (ParseIntPipe) hold one lease: the second is refused while the first runs', async () => {
    const first = get('/report/7?gate=r7');
    await eventually(
      () => gate('r7').entered,
      (n) => n === 1,
      'the first request to hold its lease',
    );
    gate('r007').release(); // were it to run, it would not wait: the answer shows its key
    const second = await get('/report/007?gate=r007');
    expect(second.status).toBe(409);
    expect(second.body).toMatchObject({ code: 'LeaseBusyError', targetKey: 'report:user:7' });
    expect(gate('r007').entered).toBe(0);
    gate('r7').release();
    const answer = await first;
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({ id: 7, key: 'report:user:7', current: 'report:user:7' });
  });

  test('a POST with { userId: 7 } and ?userId=x: the query cannot make a second lease for user 7', async () => {
    const first = post(`${url}/reports?gate=b1`, { userId: 7 });
    await eventually(
      () => gate('b1').entered,
      (n) => n === 1,
      'the first POST to hold its lease',
    );
    gate('b2').release();
    const second = await post(`${url}/reports?gate=b2&userId=x`, { userId: 7 });
    expect(second.status).toBe(409);
    expect(second.body).toMatchObject({ code: 'LeaseBusyError', targetKey: 'report:user:7' });
    // And the query alone names nothing: a body without userId is a bad key, not a lease on "x".
    gate('b3').release();
    const queryOnly = await post(`${url}/reports?gate=b3&userId=x`, { other: 1 });
    expect(queryOnly.status).toBe(400);
    expect(queryOnly.body.message).toMatch(/\{userId\} resolved to nothing/);
    gate('b1').release();
    expect((await first).body).toEqual({ key: 'report:user:7', userId: 7 });
    expect(events.some((event) => event.type === 'acquired' && event.targetKey.includes('x'))).toBe(false);
  });

  test('a named body field goes through its pipe before it becomes the key', async () => {
    const first = post(`${url}/accounts?gate=a1`, { email: ' Ann@Example.COM ' });
    await eventually(
      () => gate('a1').entered,
      (n) => n === 1,
      'the first POST to hold its lease',
    );
    gate('a2').release();
    const second = await post(`${url}/accounts?gate=a2`, { email: 'ann@example.com' });
    expect(second.status).toBe(409);
    expect(second.body).toMatchObject({ targetKey: 'account:ann@example.com' });
    gate('a1').release();
    expect((await first).body).toEqual({ key: 'account:ann@example.com', email: 'ann@example.com' });
  });

  test('declared query values, function keys and positions all see the piped values', async () => {
    expect((await get('/pages?page=0042')).body).toEqual({ key: 'page:42', page: 42 });
    const tenant = await fetch(`${url}/tenants/0009`, { method: 'POST', headers: { 'x-tenant': 'acme' } });
    expect(await tenant.json()).toEqual({ key: 'tenant:acme:9' });
    expect((await post(`${url}/positional/0012`)).body).toEqual({ key: 'pos:12' });
  });

  test('a pipe that rejects the value answers 400 before any lease is taken', async () => {
    const before = events.length;
    const answer = await get('/report/seven?gate=never');
    expect(answer.status).toBe(400);
    expect(events.slice(before).filter((event) => event.type === 'acquired')).toHaveLength(0);
  });
});

describe('a key template the handler signature cannot fill is refused at bootstrap', () => {
  const db = useTestDatabase('keys_config');

  async function bootstrap(controller: new (...args: any[]) => unknown) {
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        // Roomy leases: a gated handler holds its lease while the test looks (1 s leases were lost under a
        // loaded machine, and the first answer was a 409). Nothing here waits for an expiry.
        LeaseModule.forRoot(
          mergeLeaseOptions(FAST, {
            timing: { heartbeatIntervalMs: 250, leaseTimeoutMs: 5_000 },
            tables: { createSchema: true },
          }),
        ),
      ],
      controllers: [controller],
    })
    class ConfigModule {}
    const app = await NestFactory.create(ConfigModule, { logger: false, abortOnError: false });
    try {
      await app.init();
    } finally {
      await app.close().catch(() => undefined);
    }
  }

  test('a placeholder naming no parameter', async () => {
    @Controller()
    class NoSource {
      @Post('x/:id')
      @Exclusive('x:{id}')
      handle() {
        return {};
      }
    }
    const failure = bootstrap(NoSource);
    await expect(failure).rejects.toThrow(LeaseConfigError);
    await expect(failure).rejects.toThrow(/NoSource\.handle.*\{id\}.*@Param\('id'\)/s);
  });

  test('a placeholder two parameters declare', async () => {
    @Controller()
    class Ambiguous {
      @Post('y/:id')
      @Exclusive('y:{id}')
      handle(@Param('id') id: string, @Body('id') bodyId: string) {
        return { id, bodyId };
      }
    }
    await expect(bootstrap(Ambiguous)).rejects.toThrow(/Ambiguous\.handle.*\{id\}.*ambiguous/s);
  });

  test('a template that can never make a valid key is a LeaseConfigError naming the handler and the decorator', () => {
    // Its own text decides it: refused where it is written (at decoration time), before any bootstrap.
    const define = () => {
      @Controller()
      class TooLong {
        @Post('long/:id')
        @Exclusive(`${'x'.repeat(260)}:{id}`)
        handle(@Param('id') id: string) {
          return { id };
        }
      }
      return TooLong;
    };
    expect(define).toThrow(LeaseConfigError);
    expect(define).toThrow(/@Exclusive on TooLong\.handle.*255 bytes/s);
  });

  test("onBusy: 'skip' on an HTTP handler", async () => {
    @Controller()
    class Skipping {
      @Post('z/:id')
      @Exclusive('z:{id}', { onBusy: 'skip' })
      handle(@Param('id') id: string) {
        return { id };
      }
    }
    await expect(bootstrap(Skipping)).rejects.toThrow(/Skipping\.handle.*onBusy.*409/s);
  });

  test.each(['skip', 'wait'] as const)(
    "@Sticky with onBusy '%s' on an HTTP handler (a call on an instance that is not the owner would not answer)",
    async (onBusy) => {
      @Controller()
      class StickyRoute {
        @Post('sticky')
        @Sticky('sticky:route', { onBusy })
        handle() {
          return {};
        }
      }
      await expect(bootstrap(StickyRoute)).rejects.toThrow(/@Sticky on StickyRoute\.handle: onBusy.*409/s);
    },
  );
});
