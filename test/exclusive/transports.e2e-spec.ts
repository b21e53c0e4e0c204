/**
 * Issue 12, item 2: `@Exclusive` on WebSocket gateways and microservice handlers, over real transports
 * (`@nestjs/platform-ws` and the TCP transport of `@nestjs/microservices`): keys from the message data, one lease
 * per call (never parked on the shared socket), lease errors mapped for the transport (not to HTTP).
 */
import { Controller, Inject, ParseIntPipe } from '@nestjs/common';
import {
  ClientProxyFactory,
  type ClientProxy,
  Ctx,
  MessagePattern,
  Payload,
  type TcpContext,
  Transport,
} from '@nestjs/microservices';
import { WsAdapter } from '@nestjs/platform-ws';
import { ConnectedSocket, MessageBody, SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import { TypeOrmModule } from '@nestjs/typeorm';
import { CurrentLease, Exclusive, type Lease, LeaseModule, LeaseService, leaseEntities } from 'nest-pg-lease';
import { lastValueFrom } from 'rxjs';
import WebSocket from 'ws';
import { eventually, FAST, useTestDatabase } from '../support/db.js';
import { Gate, startApp } from './fixtures.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

const gates = new Map<string, Gate>();
const gate = (name: string) => gates.get(name) ?? gates.set(name, new Gate()).get(name)!;

@WebSocketGateway({ path: '/ws' })
class RoomsGateway {
  constructor(@Inject(LeaseService) private readonly leases: LeaseService) {}

  @SubscribeMessage('build')
  @Exclusive('room:{room}')
  async build(
    @MessageBody() data: { room: string; gate: string },
    @ConnectedSocket() client: WebSocket,
    @CurrentLease() lease: Lease,
  ) {
    const g = gate(data.gate);
    g.entered += 1;
    await g.opened;
    return {
      event: 'built',
      data: {
        room: data.room,
        key: lease.targetKey,
        current: this.leases.current()?.targetKey,
        token: String(lease.fencingToken),
        open: client.readyState === WebSocket.OPEN,
      },
    };
  }

  /** Issue 24: a duplicate message joins the running call and gets its value. */
  @SubscribeMessage('report')
  @Exclusive('ws-report:{room}', { onBusy: 'join' })
  async report(@MessageBody() data: { room: string; gate: string }, @CurrentLease() lease: Lease) {
    const g = gate(data.gate);
    g.entered += 1;
    await g.opened;
    return { event: 'reported', data: { room: data.room, token: String(lease.fencingToken) } };
  }

  /** No parameter decorators: Nest passes (socket, data); the key still comes from the data. */
  @SubscribeMessage('plain')
  @Exclusive('plain:{room}')
  async plain(client: WebSocket, data: { room: string }) {
    return { event: 'plained', data: { room: data.room, key: this.leases.current()?.targetKey } };
  }
}

@Controller()
class JobsController {
  @MessagePattern('job')
  @Exclusive('job:{userId}')
  async job(
    @Payload() data: { userId: number; gate: string },
    @Ctx() context: TcpContext,
    @CurrentLease() lease: Lease,
  ) {
    const g = gate(data.gate);
    g.entered += 1;
    await g.opened;
    return { key: lease.targetKey, pattern: context.getPattern() };
  }

  /** Issue 24: a duplicate call joins the running call and gets its value. */
  @MessagePattern('joined-job')
  @Exclusive('joined-job:{userId}', { onBusy: 'join' })
  async joinedJob(@Payload() data: { userId: number; gate: string }, @CurrentLease() lease: Lease) {
    const g = gate(data.gate);
    g.entered += 1;
    await g.opened;
    return { key: lease.targetKey, token: String(lease.fencingToken) };
  }

  @MessagePattern('named')
  @Exclusive('named:{userId}')
  async named(@Payload('userId', ParseIntPipe) userId: number, @CurrentLease() lease: Lease) {
    return { key: lease.targetKey, userId };
  }
}

/** A ws client that collects every frame it receives. */
async function wsClient(url: string) {
  const socket = new WebSocket(url);
  const frames: Array<{ event: string; data: any }> = [];
  socket.on('message', (raw: Buffer) => frames.push(JSON.parse(raw.toString())));
  await new Promise<void>((resolve, reject) => {
    socket.once('open', () => resolve());
    socket.once('error', reject);
  });
  return {
    socket,
    frames,
    send: (event: string, data: unknown) => socket.send(JSON.stringify({ event, data })),
    next: async (predicate: (frame: { event: string; data: any }) => boolean, what: string) =>
      (await eventually(
        () => frames.find(predicate),
        (frame) => frame !== undefined,
        what,
      ))!,
    close: () => socket.close(),
  };
}

describe('@Exclusive on WebSocket gateways and microservices', () => {
  const db = useTestDatabase('transports');
  let wsUrl: string;
  let rpc: ClientProxy;
  let close: () => Promise<void>;

  beforeAll(async () => {
    const started = await startApp(
      [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        LeaseModule.forRoot(mergeLeaseOptions(FAST, { tables: { createSchema: true } })),
      ],
      [JobsController],
      [RoomsGateway],
      (app) => {
        app.useWebSocketAdapter(new WsAdapter(app));
        app.connectMicroservice({ transport: Transport.TCP, options: { host: '127.0.0.1', port: 0 } });
      },
    );
    await started.app.startAllMicroservices();
    const server = started.app.getMicroservices()[0].unwrap<import('node:net').Server>();
    const { port } = server.address() as { port: number };
    rpc = ClientProxyFactory.create({ transport: Transport.TCP, options: { host: '127.0.0.1', port } });
    await rpc.connect();
    wsUrl = `${started.url.replace('http', 'ws')}/ws`;
    close = () => started.app.close();
  });

  afterEach(() => gates.forEach((g) => g.release()));

  db.beforeDrop(async () => {
    await rpc.close();
    await close();
  });

  test('ws: two messages on one socket for two rooms run at once, each under its own lease', async () => {
    const client = await wsClient(wsUrl);
    try {
      client.send('build', { room: 'a', gate: 'ws-a' });
      client.send('build', { room: 'b', gate: 'ws-b' });
      await eventually(
        () => gate('ws-a').entered + gate('ws-b').entered,
        (n) => n === 2,
        'both messages to hold a lease',
      );
      gate('ws-a').release();
      gate('ws-b').release();
      const a = await client.next(
        (frame) => frame.event === 'built' && frame.data.room === 'a',
        'the answer for room a',
      );
      const b = await client.next(
        (frame) => frame.event === 'built' && frame.data.room === 'b',
        'the answer for room b',
      );
      expect(a.data).toMatchObject({ key: 'room:a', current: 'room:a', open: true });
      expect(b.data).toMatchObject({ key: 'room:b', current: 'room:b', open: true });
      expect(a.data.token).not.toBe(b.data.token);
    } finally {
      client.close();
    }
  });

  test('ws: the same room from two sockets: one runs, the other gets an "exception" frame naming the busy target', async () => {
    const first = await wsClient(wsUrl);
    const second = await wsClient(wsUrl);
    try {
      first.send('build', { room: 'r', gate: 'ws-r1' });
      await eventually(
        () => gate('ws-r1').entered,
        (n) => n === 1,
        'the first socket to hold room r',
      );
      gate('ws-r2').release();
      second.send('build', { room: 'r', gate: 'ws-r2' });
      const refused = await second.next((frame) => frame.event === 'exception', 'the refusal');
      expect(refused.data).toMatchObject({ status: 'error', code: 'LeaseBusyError', targetKey: 'room:r' });
      expect(refused.data.retryAfterMs).toBeGreaterThan(0);
      expect(gate('ws-r2').entered).toBe(0);
      gate('ws-r1').release();
      expect((await first.next((frame) => frame.event === 'built', 'the first answer')).data.key).toBe('room:r');
    } finally {
      first.close();
      second.close();
    }
  });

  test('ws: a handler without parameter decorators keys on the message data, not the socket', async () => {
    const client = await wsClient(wsUrl);
    try {
      client.send('plain', { room: 'p' });
      expect((await client.next((frame) => frame.event === 'plained', 'the answer')).data).toEqual({
        room: 'p',
        key: 'plain:p',
      });
    } finally {
      client.close();
    }
  });

  test('rpc (TCP): the key comes from the payload; a busy target is an RpcException naming it', async () => {
    const first = lastValueFrom(rpc.send('job', { userId: 7, gate: 'rpc-1' }));
    await eventually(
      () => gate('rpc-1').entered,
      (n) => n === 1,
      'the first call to hold job:7',
    );
    gate('rpc-2').release();
    await expect(lastValueFrom(rpc.send('job', { userId: 7, gate: 'rpc-2' }))).rejects.toMatchObject({
      status: 'error',
      code: 'LeaseBusyError',
      targetKey: 'job:7',
    });
    expect(gate('rpc-2').entered).toBe(0);
    gate('rpc-1').release();
    await expect(first).resolves.toEqual({ key: 'job:7', pattern: 'job' });
  });

  test("ws and rpc with onBusy: 'join': the duplicate gets the running call's value (issue 24)", async () => {
    const one = await wsClient(wsUrl);
    const two = await wsClient(wsUrl);
    try {
      one.send('report', { room: 'r', gate: 'ws-join' });
      await eventually(
        () => gate('ws-join').entered,
        (n) => n === 1,
        'the first message to hold ws-report:r',
      );
      two.send('report', { room: 'r', gate: 'ws-join' });
      await new Promise((resolve) => setTimeout(resolve, 100));
      gate('ws-join').release();
      const first = await one.next((frame) => frame.event === 'reported', 'the first answer');
      const second = await two.next((frame) => frame.event === 'reported', 'the joined answer');
      expect(second.data).toEqual(first.data);
      expect(gate('ws-join').entered).toBe(1);
    } finally {
      one.close();
      two.close();
    }
    const call = lastValueFrom(rpc.send('joined-job', { userId: 9, gate: 'rpc-join' }));
    await eventually(
      () => gate('rpc-join').entered,
      (n) => n === 1,
      'the first call to hold joined-job:9',
    );
    const duplicate = lastValueFrom(rpc.send('joined-job', { userId: 9, gate: 'rpc-join' }));
    await new Promise((resolve) => setTimeout(resolve, 100));
    gate('rpc-join').release();
    const [a, b] = await Promise.all([call, duplicate]);
    expect(b).toEqual(a);
    expect(gate('rpc-join').entered).toBe(1);
  });

  test('rpc (TCP): a named payload field goes through its pipe before it becomes the key', async () => {
    await expect(lastValueFrom(rpc.send('named', { userId: '007' }))).resolves.toEqual({ key: 'named:7', userId: 7 });
  });
});
