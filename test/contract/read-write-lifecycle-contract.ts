/**
 * Read-write leases through the lifecycle (docs/read-write.md, issue 43): the heartbeat keeps readers and a writer past
 * their lease length, close() drains them like any lease (a run keeps its lease and saves, a waiting call is told),
 * and an operator's drain refuses both modes. On both backends, like lifecycle-contract.ts.
 */
import { type Lease, LeaseDrainedError, LeaseOperator, LeaseShutdownError } from 'nest-pg-lease';
import { type ContractSubject, freshKey, until, waitingRows } from './lease-contract.js';

const shared = { mode: 'shared' } as const;
const exclusive = { mode: 'exclusive' } as const;

/** Short leases, renewed often: past two lease lengths, only the heartbeat can have kept a lease. */
const TIMING = { timing: { heartbeatIntervalMs: 100, leaseTimeoutMs: 1_000, waiterTimeoutMs: 600 } };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function readWriteLifecycleContract(subject: () => ContractSubject): void {
  it('the heartbeat keeps two readers, then a writer, held past two lease lengths; each still writes', async () => {
    const { service, close } = await subject().open(TIMING);
    try {
      const key = freshKey('rw-heartbeat');
      const readers = [(await service.tryAcquire(key, shared))!, (await service.tryAcquire(key, shared))!];
      await sleep(2_000);
      for (const reader of readers) {
        expect({ held: reader.isHeld(), aborted: reader.signal.aborted }).toEqual({ held: true, aborted: false });
        await expect(reader.fenced(async () => 'read')).resolves.toBe('read');
      }
      // Still holding: a writer is refused.
      expect(await service.tryAcquire(key, exclusive)).toBeNull();
      await Promise.all(readers.map((reader) => reader.release()));
      const writer = (await service.tryAcquire(key, exclusive))!;
      await sleep(2_000);
      expect({ held: writer.isHeld(), aborted: writer.signal.aborted }).toEqual({ held: true, aborted: false });
      expect(await service.tryAcquire(key, shared)).toBeNull();
      await expect(writer.fenced(async () => 'wrote')).resolves.toBe('wrote');
      await writer.release();
    } finally {
      await close();
    }
  });

  it('close() drains: a reader’s run keeps its lease and saves; a waiting writer is told (LeaseShutdownError)', async () => {
    const { service, close } = await subject().open({ timing: { ...TIMING.timing, shutdownGraceMs: 60_000 } });
    const key = freshKey('rw-drain');
    let letGo!: () => void;
    const gate = new Promise<void>((resolve) => (letGo = resolve));
    let held!: Lease;
    const reading = service.run(
      key,
      async (lease) => {
        held = lease;
        await gate;
        return lease.fenced(async () => 'saved');
      },
      shared,
    );
    await until(() => service.heldLeases().length === 1, 'the reader to hold its key');
    const writing = service
      .acquire(key, { ...exclusive, onBusy: { wait: { timeoutMs: 60_000 } } })
      .catch((error: unknown) => error);
    await until(async () => (await waitingRows(service, key)) === 1, 'the writer in line');
    const closing = close();
    await expect(service.tryAcquire(freshKey('rw-after-close'), shared)).rejects.toBeInstanceOf(LeaseShutdownError);
    expect(await writing).toBeInstanceOf(LeaseShutdownError);
    expect({ aborted: held.signal.aborted, held: held.isHeld() }).toEqual({ aborted: false, held: true });
    letGo();
    await expect(reading).resolves.toBe('saved');
    await closing;
    expect(service.heldLeases()).toHaveLength(0);
  });

  it('a drained key refuses readers and writers at once (LeaseDrainedError); undrained, both run', async () => {
    const { service } = subject();
    const key = freshKey('rw-drained');
    const operator = new LeaseOperator(service);
    await operator.drain(key, { by: 'contract', reason: 'maintenance' });
    try {
      await expect(service.run(key, () => 'read', shared)).rejects.toBeInstanceOf(LeaseDrainedError);
      await expect(service.run(key, () => 'wrote', exclusive)).rejects.toBeInstanceOf(LeaseDrainedError);
    } finally {
      await operator.undrain(key, { by: 'contract', reason: 'done' });
    }
    await expect(service.run(key, () => 'read', shared)).resolves.toBe('read');
    await expect(service.run(key, () => 'wrote', exclusive)).resolves.toBe('wrote');
  });
}
