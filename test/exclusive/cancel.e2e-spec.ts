/**
 * Issue 12, item 3: no lease may outlive its caller. A caller that goes away while `@Exclusive` waits in line (a
 * global timeout interceptor answering 408, an `@Sse()` client or a WebSocket client disconnecting, a microservice
 * call timed out by the server) aborts the wait — its waiter row is gone — and a lease that arrives late is
 * released.
 * The database is checked afterwards: no held lease row, no waiter row.
 */
import {
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  type MessageEvent,
  type NestInterceptor,
  Param,
  Post,
  RequestTimeoutException,
  Sse,
} from '@nestjs/common';
import { ClientProxyFactory, type ClientProxy, MessagePattern, Payload, Transport } from '@nestjs/microservices';
import { WsAdapter } from '@nestjs/platform-ws';
import { MessageBody, SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Exclusive, type ExclusiveOptions, type Lease, LeaseModule, LeaseService, leaseEntities } from 'nest-pg-lease';
import { catchError, interval, lastValueFrom, map, type Observable, throwError, timeout, TimeoutError } from 'rxjs';
import WebSocket from 'ws';
import { eventually, FAST, startService, useTestDatabase } from '../support/db.js';
import { post, startApp } from './fixtures.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

/** The timeout interceptor of Nest's documentation (Interceptors › More operators). */
@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(400),
      catchError((error: unknown) =>
        error instanceof TimeoutError ? throwError(() => new RequestTimeoutException()) : throwError(() => error),
      ),
    );
  }
}

const WAIT: ExclusiveOptions = { priority: 1, onBusy: { wait: { timeoutMs: 30_000 } } };

@Controller()
class SlowDoorsController {
  @Post('wait/:id')
  @Exclusive('wait:{id}', WAIT)
  wait(@Param('id') id: string) {
    return { id };
  }

  @Post('try/:id')
  @Exclusive('try:{id}')
  try(@Param('id') id: string) {
    return { id };
  }

  @MessagePattern('wait')
  @Exclusive('rpc:{id}', WAIT)
  rpcWait(@Payload() data: { id: string }) {
    return data;
  }
}

@Controller()
class StreamsController {
  @Sse('stream/:id')
  @Exclusive('stream:{id}', WAIT)
  stream(@Param('id') id: string): Observable<MessageEvent> {
    return interval(100).pipe(map((n) => ({ data: { id, n } })));
  }
}

@WebSocketGateway({ path: '/ws' })
class WaitingGateway {
  @SubscribeMessage('wait')
  @Exclusive('ws:{id}', WAIT)
  wait(@MessageBody() data: { id: string }) {
    return { event: 'done', data };
  }
}

describe('teardown during acquisition aborts the wait and releases a late lease', () => {
  const db = useTestDatabase('cancel');
  let other: Awaited<ReturnType<typeof startService>>;
  let timed: { url: string; leases: LeaseService; close: () => Promise<void> };
  let streams: { url: string; leases: LeaseService; close: () => Promise<void> };
  let rpc: ClientProxy;

  const options = mergeLeaseOptions(FAST, { tables: { createSchema: true } });
  const typeorm = () => TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] });

  beforeAll(async () => {
    other = await startService(db.url, { owner: 'other-process' });
    const first = await startApp(
      // A lease timeout above the 1.5 s stall below: the acquire statement gives up client-side after
      // leaseTimeoutMs − safetyMarginMs (engine, issue 11 item 6), and this test needs its late answer.
      [
        typeorm(),
        LeaseModule.forRoot(mergeLeaseOptions(options, { timing: { leaseTimeoutMs: 3_000 }, owner: 'timed-app' })),
      ],
      [SlowDoorsController],
      [],
      (app) => {
        app.useGlobalInterceptors(new TimeoutInterceptor());
        app.connectMicroservice(
          { transport: Transport.TCP, options: { host: '127.0.0.1', port: 0 } },
          { inheritAppConfig: true },
        );
      },
    );
    await first.app.startAllMicroservices();
    const { port } = first.app.getMicroservices()[0].unwrap<import('node:net').Server>().address() as { port: number };
    rpc = ClientProxyFactory.create({ transport: Transport.TCP, options: { host: '127.0.0.1', port } });
    await rpc.connect();
    timed = { url: first.url, leases: first.app.get(LeaseService), close: () => first.app.close() };
    const second = await startApp(
      [typeorm(), LeaseModule.forRoot({ ...options, owner: 'streams-app' })],
      [StreamsController],
      [WaitingGateway],
      (app) => app.useWebSocketAdapter(new WsAdapter(app)),
    );
    streams = { url: second.url, leases: second.app.get(LeaseService), close: () => second.app.close() };
  });

  db.beforeDrop(async () => {
    await rpc.close();
    await timed.close();
    await streams.close();
    await other.close();
    await db.admin.query('DROP TRIGGER IF EXISTS stall_acquire ON job_lease');
  });

  const rows = async (key: string) => {
    const {
      rows: [counts],
    } = await db.admin.query<{ leases: number; waiters: number }>(
      `SELECT (SELECT count(*)::int FROM job_lease WHERE target_id = $1 AND lease_token IS NOT NULL) AS leases,
              (SELECT count(*)::int FROM job_lease_waiter WHERE target_id = $1) AS waiters`,
      [key],
    );
    return counts;
  };

  /** Another process holds `key` while the test runs `body`; afterwards nothing of `app` may hold or wait for it. */
  async function whileHeldElsewhere(key: string, app: { leases: LeaseService }, body: () => Promise<void>) {
    const held: Lease | null = await other.service.tryAcquire(key);
    expect(held).not.toBeNull();
    await body();
    // The aborted wait removed its row before the holder lets go ...
    await eventually(
      () => rows(key),
      (counts) => counts.waiters === 0,
      `the waiter row of ${key} to be removed`,
    );
    expect(app.leases.waitingCount()).toBe(0);
    await held!.release();
    // ... so nobody is granted the target afterwards: the other process takes it again at once.
    const again = await other.service.tryAcquire(key);
    expect(again).not.toBeNull();
    await again!.release();
    expect(app.leases.heldLeases()).toHaveLength(0);
    expect(await rows(key)).toEqual({ leases: 0, waiters: 0 });
  }

  test('HTTP: a global timeout interceptor answers 408 while @Exclusive waits; the wait ends, and the next request runs', async () => {
    await whileHeldElsewhere('wait:1', timed, async () => {
      const answer = await post(`${timed.url}/wait/1`);
      expect(answer.status).toBe(408);
    });
    expect((await post(`${timed.url}/wait/1`)).status).toBe(201);
  });

  test('HTTP: a lease granted after the 408 (the acquiring statement stalled in PostgreSQL) is released at once', async () => {
    await db.admin.query(`CREATE OR REPLACE FUNCTION stall_acquire() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.owner = 'timed-app' AND NEW.target_id = 'try:late' THEN PERFORM pg_sleep(1.5); END IF;
        RETURN NEW;
      END $$`);
    await db.admin.query(
      'CREATE TRIGGER stall_acquire BEFORE INSERT ON job_lease FOR EACH ROW EXECUTE FUNCTION stall_acquire()',
    );
    try {
      const answer = await post(`${timed.url}/try/late`);
      expect(answer.status).toBe(408);
      // The statement commits after the answer; the lease it brings must not stay.
      await eventually(
        () => timed.leases.heldLeases().length + timed.leases.waitingCount(),
        (n) => n === 0,
        'nothing held',
      );
      await eventually(
        () =>
          db.admin.query(
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'`,
          ),
        (r) => r.rows[0].n === 0,
        'the stalled statement to finish',
      );
      await eventually(
        () => rows('try:late'),
        (counts) => counts.leases === 0,
        'the late lease to be released',
        5_000,
      );
      // Still gone a few heartbeats later: it is not being renewed.
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(await rows('try:late')).toEqual({ leases: 0, waiters: 0 });
      expect(timed.leases.heldLeases()).toHaveLength(0);
    } finally {
      await db.admin.query('DROP TRIGGER IF EXISTS stall_acquire ON job_lease');
    }
  });

  test('SSE: a client that disconnects while @Exclusive waits ends the wait', async () => {
    await whileHeldElsewhere('stream:1', streams, async () => {
      const client = new AbortController();
      const response = await fetch(`${streams.url}/stream/1`, { signal: client.signal });
      expect(response.status).toBe(200);
      await eventually(
        () => rows('stream:1'),
        (counts) => counts.waiters === 1,
        'the stream to wait in line',
      );
      client.abort();
    });
  });

  test('SSE: a client that disconnects mid-stream releases the lease the stream held', async () => {
    const client = new AbortController();
    const response = await fetch(`${streams.url}/stream/2`, { signal: client.signal });
    const reader = response.body!.getReader();
    let received = '';
    while (!/"id":"2"/.test(received)) received += new TextDecoder().decode((await reader.read()).value);
    expect((await rows('stream:2')).leases).toBe(1);
    client.abort();
    await eventually(
      () => rows('stream:2'),
      (counts) => counts.leases === 0,
      'the stream lease to be released',
    );
    expect(streams.leases.heldLeases()).toHaveLength(0);
  });

  test('WebSocket: a client that disconnects while @Exclusive waits ends the wait', async () => {
    await whileHeldElsewhere('ws:1', streams, async () => {
      const socket = new WebSocket(`${streams.url.replace('http', 'ws')}/ws`);
      await new Promise((resolve) => socket.once('open', resolve));
      socket.send(JSON.stringify({ event: 'wait', data: { id: '1' } }));
      await eventually(
        () => rows('ws:1'),
        (counts) => counts.waiters === 1,
        'the message to wait in line',
      );
      socket.close();
    });
  });

  test('RPC (TCP): the server-side timeout interceptor cancels a call waiting in line', async () => {
    await whileHeldElsewhere('rpc:1', timed, async () => {
      await expect(lastValueFrom(rpc.send('wait', { id: '1' }))).rejects.toMatchObject({ status: 'error' });
    });
  });
});
