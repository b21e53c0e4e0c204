/**
 * The read-write contract (docs/read-write.md), on both backends like lease-contract.ts: readers share a key, a writer
 * excludes everyone, a waiting writer keeps later readers out, the writer's token is above every reader's, a dead
 * reader's row is taken over, and a reader whose row a writer took cannot write through `fenced()`.
 */
import {
  type Lease,
  LeaseArgumentError,
  LeaseBusyError,
  type LeaseEvent,
  LeaseLimitConflictError,
  LeaseLostError,
  LeaseWaitTimeoutError,
} from 'nest-pg-lease';
import { type ContractSubject, freshKey, until, waitingRows } from './lease-contract.js';

const shared = { mode: 'shared' } as const;
const exclusive = { mode: 'exclusive' } as const;

export function readWriteContract(subject: () => ContractSubject): void {
  it('two readers hold at once, each a lease of its own; a writer is refused meanwhile', async () => {
    const { service } = subject();
    const key = freshKey('rw-readers');
    const first = (await service.tryAcquire(key, shared))!;
    const second = (await service.tryAcquire(key, shared))!;
    try {
      expect(first).not.toBeNull();
      expect(second).not.toBeNull();
      expect([first.mode, second.mode]).toEqual(['shared', 'shared']);
      expect(first.slot).toBeUndefined();
      expect(second.token).not.toBe(first.token);
      expect(second.fencingToken).not.toBe(first.fencingToken);
      await expect(service.tryAcquire(key, exclusive)).resolves.toBeNull();
      const busy = await service.run(key, () => 'wrote', exclusive).catch((error: unknown) => error);
      expect(busy).toBeInstanceOf(LeaseBusyError);
      const held = (await service.list(key)).filter((row) => row.state === 'held');
      expect(held.map((row) => row.mode)).toEqual(['shared', 'shared']);
      expect(held.every((row) => row.slot === undefined)).toBe(true);
    } finally {
      await first.release();
      await second.release();
    }
    await expect(service.run(key, (lease) => lease.mode, exclusive)).resolves.toBe('exclusive');
  });

  it('a writer excludes readers and writers; its release lets the waiting readers in together', async () => {
    const { service } = subject();
    const key = freshKey('rw-writer');
    const writer = (await service.tryAcquire(key, exclusive))!;
    expect(writer.mode).toBe('exclusive');
    await expect(service.tryAcquire(key, shared)).resolves.toBeNull();
    await expect(service.tryAcquire(key, exclusive)).resolves.toBeNull();
    const readers = [service.acquire(key, shared), service.acquire(key, shared)];
    await until(async () => (await waitingRows(service, key)) === 2, 'two readers in line');
    await writer.release();
    const held = await Promise.all(readers);
    try {
      expect(held.every((lease) => lease.isHeld())).toBe(true);
      for (const reader of held) expect(reader.fencingToken).toBeGreaterThan(writer.fencingToken);
    } finally {
      await Promise.all(held.map((lease) => lease.release()));
    }
  });

  it("a writer waits for the readers; its token is above every reader's", async () => {
    const { service } = subject();
    const key = freshKey('rw-wait');
    const readers = [(await service.tryAcquire(key, shared))!, (await service.tryAcquire(key, shared))!];
    let granted = false;
    const writing = service.acquire(key, exclusive).then((lease) => ((granted = true), lease));
    await until(async () => (await waitingRows(service, key)) === 1, 'the writer in line');
    await readers[0].release();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(granted).toBe(false);
    await readers[1].release();
    const writer = await writing;
    try {
      for (const reader of readers) expect(writer.fencingToken).toBeGreaterThan(reader.fencingToken);
    } finally {
      await writer.release();
    }
  });

  it('writer preference: a reader that comes after a waiting writer queues behind it', async () => {
    const { service } = subject();
    const key = freshKey('rw-preference');
    const reader = (await service.tryAcquire(key, shared))!;
    const order: string[] = [];
    const writing = service.run(key, () => order.push('writer'), { ...exclusive, onBusy: 'wait' });
    await until(async () => (await waitingRows(service, key)) === 1, 'the writer in line');
    await expect(service.tryAcquire(key, shared)).resolves.toBeNull();
    const busy = await service.run(key, () => 'read', shared).catch((error: unknown) => error);
    expect(busy).toBeInstanceOf(LeaseBusyError);
    const late = service.run(key, () => order.push('late reader'), { ...shared, onBusy: 'wait' });
    await until(async () => (await waitingRows(service, key)) === 2, 'the late reader behind the writer');
    await reader.release();
    await Promise.all([writing, late]);
    expect(order).toEqual(['writer', 'late reader']);
  });

  it('priority and FIFO as in any line: a reader of higher priority passes a waiting writer; writers by rank', async () => {
    const { service } = subject();
    const key = freshKey('rw-priority');
    const reader = (await service.tryAcquire(key, shared))!;
    const order: string[] = [];
    const low = service.run(key, () => order.push('writer 0'), { ...exclusive, onBusy: 'wait' });
    await until(async () => (await waitingRows(service, key)) === 1, 'the first writer in line');
    const high = service.run(key, () => order.push('writer 5'), { ...exclusive, priority: 5, onBusy: 'wait' });
    await until(async () => (await waitingRows(service, key)) === 2, 'the second writer in line');
    // A newcomer reader ranked above every waiter is not behind them (the no-barging rule compares ranks).
    const urgent = (await service.tryAcquire(key, { ...shared, priority: 9 }))!;
    expect(urgent).not.toBeNull();
    await urgent.release();
    await reader.release();
    await Promise.all([low, high]);
    expect(order).toEqual(['writer 5', 'writer 0']);
  });

  it("a dead reader's row is taken over: the waiting writer gets the key, the reader cannot write", async () => {
    const { service } = subject();
    const key = freshKey('rw-dead-reader');
    const reader = (await service.tryAcquire(key, shared))!;
    const writing = service.acquire(key, exclusive);
    await until(async () => (await waitingRows(service, key)) === 1, 'the writer in line');
    // The reader's row expires as if its process had stopped renewing; the writer takes the key over.
    await subject().expire(key);
    const writer = await writing;
    try {
      expect(writer.fencingToken).toBeGreaterThan(reader.fencingToken);
      let wrote = false;
      const fenced = await reader
        .fenced(() => {
          wrote = true;
          return Promise.resolve();
        })
        .catch((error: unknown) => error);
      expect(fenced).toBeInstanceOf(LeaseLostError);
      expect(wrote).toBe(false);
    } finally {
      await writer.release();
    }
  });

  it('events name the mode of a read-write lease', async () => {
    const { service } = subject();
    const key = freshKey('rw-events');
    const seen: LeaseEvent[] = [];
    const subscription = service.events$.subscribe((event) => {
      if ('targetKey' in event && event.targetKey === key) seen.push(event);
    });
    try {
      await service.run(key, () => 'read', shared);
      await service.run(key, () => 'wrote', exclusive);
    } finally {
      subscription.unsubscribe();
    }
    const modes = seen
      .filter((event) => event.type === 'acquired' || event.type === 'released')
      .map((event) => `${event.type} ${'mode' in event ? event.mode : '-'}`);
    expect(modes).toEqual(['acquired shared', 'released shared', 'acquired exclusive', 'released exclusive']);
  });

  it('a waiting reader gives up at its bound, leaving no row in line', async () => {
    const { service } = subject();
    const key = freshKey('rw-timeout');
    const writer = (await service.tryAcquire(key, exclusive))!;
    try {
      const late = service.acquire(key, { ...shared, onBusy: { wait: { timeoutMs: 100 } } });
      await expect(late).rejects.toBeInstanceOf(LeaseWaitTimeoutError);
      await until(async () => (await waitingRows(service, key)) === 0, 'the line empty');
    } finally {
      await writer.release();
    }
  });

  it('refuses nonsense before writing anything: join, preempt, limit, hold, an unknown mode, an upgrade', async () => {
    const { service } = subject();
    const key = freshKey('rw-nonsense');
    const bad: object[] = [
      { mode: 'shared', onBusy: 'join' },
      { mode: 'exclusive', onBusy: 'preempt' },
      { mode: 'shared', limit: 2 },
      { mode: 'exclusive', holdAtLeastMs: 10 },
      { mode: 'reader' },
    ];
    for (const options of bad) {
      await expect(service.run(key, () => 'ran', options as never)).rejects.toBeInstanceOf(LeaseArgumentError);
    }
    await expect(service.tryAcquire(key, { mode: 'shared', limit: 3 } as never)).rejects.toBeInstanceOf(
      LeaseArgumentError,
    );
    await expect(service.acquire(key, { mode: 'exclusive', onBusy: 'preempt' } as never)).rejects.toBeInstanceOf(
      LeaseArgumentError,
    );
    expect(await service.list(key)).toEqual([]);
    const upgrade = await service
      .run(key, () => service.run(key, () => 'wrote', exclusive), shared)
      .catch((error: unknown) => error);
    expect(upgrade).toBeInstanceOf(LeaseArgumentError);
    const nested = await service.run(key, () => service.run(key, (lease: Lease) => lease.mode, shared), exclusive);
    expect(nested).toBe('exclusive');
  });

  it('a key held by a single holder or a semaphore is not a read-write key: LeaseLimitConflictError', async () => {
    const { service } = subject();
    const key = freshKey('rw-conflict');
    const single = (await service.tryAcquire(key))!;
    try {
      await expect(service.tryAcquire(key, shared)).rejects.toBeInstanceOf(LeaseLimitConflictError);
      await expect(service.tryAcquire(key, exclusive)).rejects.toBeInstanceOf(LeaseLimitConflictError);
    } finally {
      await single.release();
    }
    const reader = (await service.tryAcquire(key, shared))!;
    try {
      const conflict = await service.tryAcquire(key, { limit: 3 }).catch((error: unknown) => error);
      expect(conflict).toBeInstanceOf(LeaseLimitConflictError);
      expect((conflict as Error).message).toMatch(/held in shared mode/);
      // A plain call (the writer a user forgot to mark) finds the key busy, never granted beside the readers.
      expect(await service.tryAcquire(key)).toBeNull();
      await expect(service.run(key, () => 'ran beside the readers')).rejects.toBeInstanceOf(LeaseBusyError);
    } finally {
      await reader.release();
    }
  });
}
