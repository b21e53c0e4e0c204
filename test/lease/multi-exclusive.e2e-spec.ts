/**
 * `@Exclusive([template1, template2, …])` (docs/multi-key.md): the keys of each call from its arguments, taken all or
 * none in the global order, the method run with the call's `MultiLease` (`@CurrentLease()`), every key released when
 * it settles; `'throw'`, `'skip'` and `'wait'`; the declaration's own rules refused at decoration. On the testing kit's
 * memory backend: the engine and the decorator's wrapper are the library's own, only the rows live in memory.
 */
import { Controller, Inject, Injectable, Param, Post } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import {
  CurrentLease,
  Exclusive,
  LeaseArgumentError,
  LeaseBusyError,
  LeaseConfigError,
  LeaseService,
  type MultiExclusiveOptions,
  type MultiLease,
} from 'nest-pg-lease';
import { LeaseTestingModule } from 'nest-pg-lease/testing';

@Injectable()
class Payments {
  runs = 0;
  gate: Promise<void> = Promise.resolve();

  constructor(@Inject(LeaseService) private readonly leases: LeaseService) {}

  @Exclusive(['invoice:{1}', 'account:{0}'])
  async pay(accountId: string, invoiceId: string) {
    this.runs += 1;
    // A provider's method has no @CurrentLease(): every key's lease is in its call chain (a nested run borrows it).
    const current = this.leases.current()!;
    const account = await this.leases.run(`account:${accountId}`, (lease) => lease.fencingToken);
    const held = this.leases.heldLeases().map((lease) => lease.targetKey);
    return { current: current.targetKey, borrowed: typeof account, held: held.sort() };
  }

  @Exclusive(['account:{0}', 'ledger'], { onBusy: 'skip' })
  async close(accountId: string): Promise<string> {
    this.runs += 1;
    return `closed ${accountId}`;
  }

  @Exclusive(['account:{0}', 'invoice:{1}'], { onBusy: { wait: { timeoutMs: 30_000 } } })
  async settle(accountId: string, invoiceId: string): Promise<string> {
    return `settled ${accountId}/${invoiceId}`;
  }

  @Exclusive(['account:{0}', 'account:{1}'])
  async transfer(from: string, to: string): Promise<string> {
    return `${from} → ${to}`;
  }
}

@Controller()
class PaymentsController {
  @Post('pay/:account/:invoice')
  @Exclusive(['account:{account}', 'invoice:{invoice}'])
  async pay(@Param('account') _a: string, @Param('invoice') _i: string, @CurrentLease() lease: MultiLease) {
    return { keys: lease.targetKeys, held: lease.isHeld(), tokens: [...lease.fencingTokens.values()].map(String) };
  }
}

describe('@Exclusive with several key templates', () => {
  let module: TestingModule;
  let payments: Payments;
  let leases: LeaseService;

  beforeEach(async () => {
    module = await Test.createTestingModule({
      imports: [LeaseTestingModule.forRoot({ fencedTransaction: (work) => work({} as never) })],
      providers: [Payments],
    }).compile();
    await module.init();
    payments = module.get(Payments);
    leases = module.get(LeaseService);
  });
  afterEach(() => module.close());

  it('takes every key of the call (global order), every lease in its call chain, releases them all', async () => {
    await expect(payments.pay('7', '9')).resolves.toEqual({
      current: 'invoice:9', // the last key of the global order
      borrowed: 'bigint',
      held: ['account:7', 'invoice:9'],
    });
    expect(leases.heldLeases()).toHaveLength(0);
  });

  it("'throw': one key busy refuses the call, nothing held; 'skip': the method does not run", async () => {
    const holder = (await leases.tryAcquire('invoice:9'))!;
    await expect(payments.pay('7', '9')).rejects.toBeInstanceOf(LeaseBusyError);
    expect(leases.heldLeases().map((lease) => lease.targetKey)).toEqual(['invoice:9']);
    await holder.release();
    const ledger = (await leases.tryAcquire('ledger'))!;
    await expect(payments.close('7')).resolves.toBeUndefined();
    expect(payments.runs).toBe(0);
    await ledger.release();
    await expect(payments.close('7')).resolves.toBe('closed 7');
  });

  it("'wait': waits for the busy key, then runs", async () => {
    const holder = (await leases.tryAcquire('invoice:3'))!;
    const settled = payments.settle('1', '3');
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(
      leases
        .heldLeases()
        .map((lease) => lease.targetKey)
        .sort(),
    ).toEqual(['account:1', 'invoice:3']);
    await holder.release();
    await expect(settled).resolves.toBe('settled 1/3');
    expect(leases.heldLeases()).toHaveLength(0);
  });

  it('two templates that fill to the same key: a LeaseArgumentError, nothing run', async () => {
    await expect(payments.transfer('5', '5')).rejects.toBeInstanceOf(LeaseArgumentError);
    await expect(payments.transfer('5', '6')).resolves.toBe('5 → 6');
  });

  it('on an HTTP handler, @CurrentLease() is the MultiLease; a busy key answers 409', async () => {
    const http = await Test.createTestingModule({
      imports: [LeaseTestingModule.forRoot()],
      controllers: [PaymentsController],
    }).compile();
    const app = http.createNestApplication();
    await app.listen(0, '127.0.0.1');
    try {
      const url = `${await app.getUrl()}/pay/7/9`.replace('[::1]', '127.0.0.1');
      const ok = await fetch(url, { method: 'POST' });
      expect(ok.status).toBe(201);
      const body = (await ok.json()) as { keys: string[]; held: boolean; tokens: string[] };
      expect(body).toMatchObject({ keys: ['account:7', 'invoice:9'], held: true });
      expect(body.tokens).toHaveLength(2);
      const service = app.get(LeaseService);
      const holder = (await service.tryAcquire('invoice:9'))!;
      expect((await fetch(url, { method: 'POST' })).status).toBe(409);
      expect(service.heldLeases().map((lease) => lease.targetKey)).toEqual(['invoice:9']);
      await holder.release();
    } finally {
      await app.close();
    }
  });

  it('refuses at decoration what a set of keys cannot do', () => {
    const declare = (templates: string[], options?: object) => () =>
      Exclusive(templates, options as MultiExclusiveOptions)({}, 'm', { value: () => undefined });
    expect(declare([])).toThrow(LeaseConfigError);
    expect(declare(['a:{0}', 'a:{0}'])).toThrow(LeaseConfigError);
    expect(declare(['a', ''])).toThrow(LeaseConfigError);
    expect(declare(Array.from({ length: 17 }, (_, at) => `k${at}`))).toThrow(LeaseConfigError);
    expect(declare(['a', 'b'], { onBusy: 'join' })).toThrow(LeaseConfigError);
    expect(declare(['a', 'b'], { onBusy: { preempt: {} } })).toThrow(LeaseConfigError);
    expect(declare(['a', 'b'], { limit: 2 })).toThrow(LeaseConfigError);
    expect(declare(['a', 'b'], { onBusy: 'wait' })).not.toThrow();
  });
});
