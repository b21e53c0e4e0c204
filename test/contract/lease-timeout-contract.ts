/**
 * The lease contract's cases of a lease length per call (`leaseTimeoutMs` of `run`, `acquire`, `tryAcquire`; see
 * options/lease-timeout.ts), run like lease-contract.ts against the one engine over each backend. A holder that "stops
 * renewing" has its renewals held back (`pauseRenewals`): its rows expire by their own length, as a paused or
 * partitioned process's would.
 */
import { type Lease, LeaseArgumentError, type LeaseLostError } from 'nest-pg-lease';
import { pauseRenewals } from '../../libs/lease/src/internal.js';
import { aborted, type ContractSubject, freshKey, until, waitingRows } from './lease-contract.js';

export function leaseTimeoutContract(subject: () => ContractSubject): void {
  // Each case opens a service of its own with the timing it needs (the memory subject's services share no rows, so
  // the "other process" that takes over is the same service: it holds no lease in the call chain, it just attempts).
  it('leaseTimeoutMs per call: a short lease whose holder stops renewing is taken over after ITS timeout', async () => {
    // The module's lease is 30 s; this call's is 600 ms (the floor here: 400 ms, see options/lease-timeout.ts).
    const timing = { heartbeatIntervalMs: 100, leaseTimeoutMs: 30_000, fencedIdleTimeoutMs: 500, shutdownGraceMs: 200 };
    const { service, close } = await subject().open({ timing });
    const key = freshKey('short-lease');
    let taker: Lease | null = null;
    try {
      const lease = (await service.tryAcquire(key, { leaseTimeoutMs: 600 }))!;
      expect((await service.list(key)).map((row) => row.timeoutMs)).toEqual([600]);
      await expect(service.tryAcquire(key)).resolves.toBeNull();
      const paused = pauseRenewals(service);
      const since = performance.now();
      await until(async () => (taker = await service.tryAcquire(key)) !== null, 'the takeover', 8_000);
      // Long before the module's 30 s; and the holder had given it up first (its local deadline: 600 − margin).
      expect(performance.now() - since).toBeLessThan(8_000);
      expect(lease.isHeld()).toBe(false);
      expect(((await aborted(lease.signal)) as LeaseLostError).reason).toBe('renewal-deadline');
      expect(taker!.fencingToken).toBeGreaterThan(lease.fencingToken);
      paused.resume();
    } finally {
      await (taker as Lease | null)?.release();
      await close();
    }
  });

  it('leaseTimeoutMs per call: a long lease survives a stop of its renewals longer than the module’s timeout', async () => {
    const { service, close } = await subject().open({
      timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000, shutdownGraceMs: 200 },
    });
    const key = freshKey('long-lease');
    try {
      const lease = (await service.tryAcquire(key, { leaseTimeoutMs: 6_000 }))!;
      const paused = pauseRenewals(service);
      // Two and a half of the module's timeouts without a renewal: the row lives by its own 6 s.
      await new Promise((resolve) => setTimeout(resolve, 2_500));
      await expect(service.tryAcquire(key)).resolves.toBeNull();
      expect(lease.isHeld()).toBe(true);
      paused.resume();
      expect((await service.list(key))[0]).toMatchObject({ fencingToken: lease.fencingToken, timeoutMs: 6_000 });
      await lease.release();
      await expect(service.run(key, () => 'ran')).resolves.toBe('ran');
    } finally {
      await close();
    }
  });

  it('leaseTimeoutMs per call: renewals keep each lease’s own length; a waiter’s grant takes its own', async () => {
    const { service, close } = await subject().open({
      timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000, shutdownGraceMs: 200 },
    });
    const [own, plain, line] = [freshKey('own-length'), freshKey('module-length'), freshKey('waiter-length')];
    const renewals = new Map<string, number>();
    const sub = service.events$.subscribe((event) => {
      if (event.type === 'renewed') renewals.set(event.targetKey, (renewals.get(event.targetKey) ?? 0) + 1);
    });
    const renewed = (key: string, times: number) =>
      until(() => (renewals.get(key) ?? 0) >= times, `renewals of ${key}`);
    const timeoutOf = async (key: string) => (await service.list(key)).find((row) => row.state === 'held')?.timeoutMs;
    const held: Lease[] = [];
    try {
      held.push((await service.tryAcquire(own, { leaseTimeoutMs: 3_000 }))!, (await service.tryAcquire(plain))!);
      const first = (await service.tryAcquire(line))!;
      const waiting = service.acquire(line, { leaseTimeoutMs: 2_000, onBusy: { wait: { timeoutMs: 30_000 } } });
      await until(async () => (await waitingRows(service, line)) === 1, 'a waiter in line');
      await Promise.all([renewed(own, 2), renewed(plain, 2)]);
      expect(await timeoutOf(own)).toBe(3_000);
      expect(await timeoutOf(plain)).toBe(1_000);
      await first.release();
      held.push(await waiting);
      await renewed(line, (renewals.get(line) ?? 0) + 2);
      expect(await timeoutOf(line)).toBe(2_000);
    } finally {
      sub.unsubscribe();
      await Promise.all(held.map((lease) => lease.release()));
      await close();
    }
  });

  it('leaseTimeoutMs per call: acquisitions sent together (one batch on PostgreSQL) each keep their own', async () => {
    const { service, close } = await subject().open({
      timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000, shutdownGraceMs: 200 },
    });
    const lengths = [undefined, 2_000, 3_000, undefined, 4_000];
    const keys = lengths.map((_, i) => freshKey(`batch-length-${i}`));
    try {
      const leases = await Promise.all(keys.map((key, i) => service.tryAcquire(key, { leaseTimeoutMs: lengths[i] })));
      const rows = await Promise.all(keys.map(async (key) => (await service.list(key))[0]?.timeoutMs));
      expect(rows).toEqual([1_000, 2_000, 3_000, 1_000, 4_000]);
      await Promise.all(leases.map((lease) => lease!.release()));
    } finally {
      await close();
    }
  });

  it('leaseTimeoutMs per call: a length the module’s timing cannot keep is refused before anything is written', async () => {
    // Interval 100, margin 100, fenced idle timeout 1 000: the floor is (1 000 + 100 + 2 × 100) / 2 = 650.
    const { service, close } = await subject().open({
      timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000, shutdownGraceMs: 200 },
    });
    const key = freshKey('refused-length');
    try {
      const below = await service.run(key, () => 'ran', { leaseTimeoutMs: 649 }).catch((error: unknown) => error);
      expect(below).toBeInstanceOf(LeaseArgumentError);
      expect((below as LeaseArgumentError).targetKey).toBe(key);
      expect((below as Error).message).toMatch(
        /^leaseTimeoutMs \(649\) must be at least 650 under this module’s timing/,
      );
      const waiting = service.acquire(key, { leaseTimeoutMs: 1.5, onBusy: { wait: { timeoutMs: 1_000 } } });
      await expect(waiting).rejects.toBeInstanceOf(LeaseArgumentError);
      await expect(service.tryAcquire(key, { leaseTimeoutMs: 0 })).rejects.toBeInstanceOf(LeaseArgumentError);
      expect(await service.list(key)).toEqual([]);
      await expect(service.run(key, () => 'ran', { leaseTimeoutMs: 650 })).resolves.toBe('ran');
    } finally {
      await close();
    }
  });
}
