/**
 * Several keys at once (`run([k1, k2, …], work, options)`; docs/multi-key.md), on each backend: all or none, no
 * deadlock between overlapping sets taken in opposite orders, one fencing token per key, `fenced()` checking every
 * token, the work aborted when any lease is lost, every key released when the work settles.
 */
import {
  Exclusive,
  type Lease,
  LeaseArgumentError,
  LeaseBusyError,
  LeaseLostError,
  type LeaseService,
  LeaseShutdownError,
  LeaseWaitTimeoutError,
  type MultiLease,
} from 'nest-pg-lease';
import { aborted, type ContractSubject, freshKey, until, waitingRows } from './lease-contract.js';

/** Rows of `keys` held now (any holder). */
const heldRows = async (service: LeaseService, keys: readonly string[]) => {
  const rows = await Promise.all(keys.map((key) => service.list(key)));
  return rows.flat().filter((row) => row.state === 'held').length;
};

/** `promise`, or a rejection naming `what` after `ms` (a liveness bound far above the expected time). */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not done within ${ms} ms (a deadlock?)`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export function multiKeyContract(subject: () => ContractSubject): void {
  describe('several keys at once', () => {
    it('takes every key, in the global order, one fencing token each, and releases them all', async () => {
      const { service } = subject();
      const [a, b, c] = ['c', 'a', 'b'].map((name) => freshKey(`multi-${name}`));
      const seen = await service.run([a, b, c], async (lease: MultiLease) => {
        expect(lease.isHeld()).toBe(true);
        expect(await heldRows(service, [a, b, c])).toBe(3);
        const rows = (await Promise.all([a, b, c].map((key) => service.list(key)))).flat();
        for (const row of rows) expect(lease.fencingTokens.get(row.targetKey)).toBe(row.fencingToken);
        expect(lease.lease(b)?.targetKey).toBe(b);
        return { keys: lease.targetKeys, tokens: lease.leases.map((one) => one.fencingToken) };
      });
      expect(seen.keys).toEqual([a, b, c].sort());
      expect(seen.tokens.every((token) => typeof token === 'bigint')).toBe(true);
      expect(await heldRows(service, [a, b, c])).toBe(0);
      expect(service.heldLeases()).toHaveLength(0);
    });

    it("onBusy 'throw': one key busy, nothing held afterwards, the other key free", async () => {
      const { service } = subject();
      const first = freshKey('multi-free');
      const busy = `${first}~busy`; // after `first` in the global order: `first` is taken, then given back
      const holder = (await service.tryAcquire(busy))!;
      let ran = false;
      try {
        const refused = await service.run([busy, first], () => (ran = true)).catch((error: unknown) => error);
        expect(refused).toBeInstanceOf(LeaseBusyError);
        expect((refused as LeaseBusyError).targetKey).toBe(busy);
        expect(ran).toBe(false);
        expect(service.heldLeases().map((lease) => lease.targetKey)).toEqual([busy]);
        const free = (await service.tryAcquire(first))!;
        expect(free).not.toBeNull();
        await free.release();
      } finally {
        await holder.release();
      }
    });

    it("onBusy 'wait': waits for a busy key holding the ones before it; a timeout gives every key back", async () => {
      const { service } = subject();
      const a = freshKey('multi-wait-a');
      const b = `${a}~b`;
      const holder = (await service.tryAcquire(b))!;
      const timedOut = await service
        .run([a, b], () => 'ran', { onBusy: { wait: { timeoutMs: 200 } } })
        .catch((error: unknown) => error);
      expect(timedOut).toBeInstanceOf(LeaseWaitTimeoutError);
      expect(await heldRows(service, [a])).toBe(0);
      const waiting = service.run([b, a], (lease) => lease.targetKeys, { onBusy: { wait: { timeoutMs: 30_000 } } });
      await until(async () => (await waitingRows(service, b)) === 1, 'the call in the line of the busy key');
      expect(await heldRows(service, [a])).toBe(1); // the key before it, held meanwhile
      await holder.release();
      await expect(waiting).resolves.toEqual([a, b]);
      expect(await heldRows(service, [a, b])).toBe(0);
    });

    it('close() while a call waits for its second key: told LeaseShutdownError, its first key given back', async () => {
      // One service holds the second key and closes: the grace ends the holder, the close tells the waiting call.
      const { service, close } = await subject().open({ timing: { shutdownGraceMs: 200 } });
      const a = freshKey('multi-close-a');
      const b = `${a}~b`;
      const holder = (await service.tryAcquire(b))!;
      const released: string[] = [];
      service.events$.subscribe((event) => event.type === 'released' && released.push(event.targetKey));
      const waiting = service
        .run([a, b], () => 'ran', { onBusy: { wait: { timeoutMs: 30_000 } } })
        .catch((error: unknown) => error);
      await until(async () => (await waitingRows(service, b)) === 1, 'the call in the line of the busy key');
      expect(await heldRows(service, [a])).toBe(1);
      await within(close(), 10_000, 'close()');
      expect(await waiting).toBeInstanceOf(LeaseShutdownError);
      expect(released).toContain(a);
      expect({ held: service.heldLeases().length, holder: holder.isHeld() }).toEqual({ held: 0, holder: false });
    });

    it('two callers with overlapping sets in opposite orders both finish (no deadlock)', async () => {
      const { service } = subject();
      const [a, b, c] = ['a', 'b', 'c'].map((name) => freshKey(`multi-cross-${name}`));
      const inside = new Map<string, number>();
      let overlaps = 0;
      const caller = async (keys: string[], rounds: number) => {
        for (let round = 0; round < rounds; round++) {
          await service.run(
            keys,
            async () => {
              for (const key of keys) {
                if (inside.get(key)) overlaps += 1;
                inside.set(key, 1);
              }
              await new Promise((resolve) => setTimeout(resolve, 2));
              for (const key of keys) inside.set(key, 0);
            },
            { onBusy: { wait: { timeoutMs: 60_000 } } },
          );
        }
      };
      await within(
        Promise.all([caller([a, b, c], 15), caller([c, b, a], 15), caller([b, a], 15)]),
        90_000,
        'three callers over overlapping keys',
      );
      expect(overlaps).toBe(0);
      expect(await heldRows(service, [a, b, c])).toBe(0);
    });

    it('a lost lease of one key aborts the work and refuses fenced(); every key is released', async () => {
      const current = subject();
      const { service } = current;
      const a = freshKey('multi-lost-a');
      const b = `${a}~b`;
      let writes = 0;
      const write = async () => {
        writes += 1;
        return 'saved';
      };
      const outcome = await service.run([a, b], async (lease) => {
        await expect(lease.fenced(write)).resolves.toBe('saved');
        await current.takeOver(b);
        const why = await aborted(lease.signal);
        expect(why).toBeInstanceOf(LeaseLostError);
        expect((why as LeaseLostError).targetKey).toBe(b);
        expect(lease.isHeld()).toBe(false);
        expect(lease.lease(a)?.isHeld()).toBe(true);
        const refused = await lease.fenced(write).catch((error: unknown) => error);
        expect(refused).toBeInstanceOf(LeaseLostError);
        return 'ended';
      });
      expect(outcome).toBe('ended');
      expect(writes).toBe(1);
      expect(service.heldLeases()).toHaveLength(0);
      expect(await heldRows(service, [a])).toBe(0);
    });

    it('fenced() is refused when one token is stale, though the local view still holds it', async () => {
      const current = subject();
      const { service } = current;
      const a = freshKey('multi-stale-a');
      const b = `${a}~b`;
      let writes = 0;
      await service.run([a, b], async (lease) => {
        // On PostgreSQL no renewal has run yet: the fence's own check of the tokens sees the row is another's.
        await current.takeOver(a);
        const refused = await lease
          .fenced(async () => {
            writes += 1;
          })
          .catch((error: unknown) => error);
        expect(refused).toBeInstanceOf(LeaseLostError);
        expect((refused as LeaseLostError).targetKey).toBe(a);
        expect(lease.lease(a)?.isHeld()).toBe(false);
      });
      expect(writes).toBe(0);
    });

    it('releases every key when the work throws', async () => {
      const { service } = subject();
      const keys = ['x', 'y'].map((name) => freshKey(`multi-throw-${name}`));
      const failure = new Error('work failed');
      await expect(
        service.run(keys, () => {
          throw failure;
        }),
      ).rejects.toBe(failure);
      expect(service.heldLeases()).toHaveLength(0);
      expect(await heldRows(service, keys)).toBe(0);
      await expect(service.run(keys, () => 'again')).resolves.toBe('again');
    });

    it('a nested run of one of the keys borrows its lease', async () => {
      const { service } = subject();
      const keys = ['p', 'q'].map((name) => freshKey(`multi-nested-${name}`));
      await service.run(keys, async (lease) => {
        const inner = await service.run(keys[0], (one) => one.fencingToken);
        expect(inner).toBe(lease.fencingTokens.get(keys[0]));
      });
    });

    it('refuses bad input with LeaseArgumentError before anything is written', async () => {
      const { service } = subject();
      const key = freshKey('multi-input');
      const refusals: Array<[unknown, object]> = [
        [[], {}],
        [[key, key], {}],
        [[key, 42], {}],
        [[key, ''], {}],
        [Array.from({ length: 17 }, (_, at) => `${key}:${at}`), {}],
        [[key, `${key}:2`], { onBusy: 'join' }],
        [[key, `${key}:2`], { onBusy: { preempt: {} } }],
        [[key, `${key}:2`], { limit: 2 }],
        [[key, `${key}:2`], { sticky: true }],
      ];
      for (const [keys, options] of refusals) {
        const run = service.run as (keys: unknown, work: () => unknown, options: object) => Promise<unknown>;
        await expect(run.call(service, keys, () => 'ran', options)).rejects.toBeInstanceOf(LeaseArgumentError);
      }
      expect(await heldRows(service, [key, `${key}:2`])).toBe(0);
      expect(await service.list(key)).toEqual([]);
    });
  });
}

/** What the overloads refuse at compile time (`tsc` checks each `@ts-expect-error`; never called). */
export function refusedByTheCompiler(service: LeaseService): void {
  // @ts-expect-error a set of keys has no one run to join
  void service.run(['a', 'b'], () => 1, { onBusy: 'join' });
  // @ts-expect-error nor one holder to preempt
  void service.run(['a', 'b'], () => 1, { onBusy: { preempt: {} } });
  // @ts-expect-error nor is it a semaphore
  void service.run(['a', 'b'], () => 1, { limit: 2 });
  // @ts-expect-error the work of several keys gets a MultiLease, not a Lease
  void service.run(['a', 'b'], (lease: Lease) => lease.token);
  // @ts-expect-error the work of one key gets a Lease
  void service.run('a', (lease: MultiLease) => lease.targetKeys);
  // @ts-expect-error the decorator form cannot join either
  Exclusive(['a:{0}', 'b:{1}'], { onBusy: 'join' });
  // The forms that are right compile.
  void service.run(['a', 'b'], (lease: MultiLease) => lease.fencingTokens, { onBusy: { wait: { timeoutMs: 1 } } });
  Exclusive(['a:{0}', 'b:{1}'], { onBusy: 'skip', priority: 2 });
}
