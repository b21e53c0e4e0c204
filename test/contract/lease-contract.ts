/**
 * The lease contract: one set of cases run against the one engine over each backend: the memory backend of
 * `nest-pg-lease/testing` (memory.e2e-spec.ts, in the unit tier) and PostgreSQL (postgres.e2e-spec.ts), so that a
 * unit test on the in-memory service learns what production does. Each case waits for outcomes, never for time.
 */
import {
  type Lease,
  LeaseBusyError,
  LeaseDrainedError,
  LeaseLimitConflictError,
  LeaseLostError,
  type LeaseModuleOptions,
  LeaseOperator,
  type LeaseService,
  LeaseWaitTimeoutError,
} from 'nest-pg-lease';

/** One service under the contract, with the hand of "another process" on its keys. */
export interface ContractSubject {
  readonly service: LeaseService;
  /** Another owner takes the key over (the holder must lose it: `taken-over`). */
  takeOver(targetKey: string): Promise<unknown>;
  /** The key's lease expires (the holder must lose it: `renewal-deadline`). */
  expire(targetKey: string): Promise<unknown>;
  /** A service of its own with these options (the cases that close it); `close()` closes it and what it owns. */
  open(options: LeaseModuleOptions): Promise<{ service: LeaseService; close(): Promise<void> }>;
}

/** Resolves once `predicate` holds, polling; rejects after `timeoutMs` (generous: the CPU is shared). */
export async function until(
  predicate: () => Promise<boolean> | boolean,
  what: string,
  timeoutMs = 20_000,
): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

export const aborted = (signal: AbortSignal) =>
  new Promise<unknown>((resolve) => {
    if (signal.aborted) resolve(signal.reason);
    else signal.addEventListener('abort', () => resolve(signal.reason), { once: true });
  });

export const waitingRows = async (service: LeaseService, key: string) =>
  (await service.list(key)).filter((row) => row.state === 'waiting').length;

let keys = 0;
/** A key of its own per case (the PostgreSQL subject shares one database across the cases). */
export const freshKey = (name: string) => `contract:${name}:${++keys}:${Date.now()}`;

export function leaseContract(subject: () => ContractSubject): void {
  it('refuses a held key: tryAcquire answers null, run without a wait rejects with LeaseBusyError', async () => {
    const { service } = subject();
    const key = freshKey('busy');
    const lease = (await service.tryAcquire(key))!;
    try {
      expect(lease).not.toBeNull();
      await expect(service.tryAcquire(key)).resolves.toBeNull();
      await expect(service.run(key, () => 'ran')).rejects.toBeInstanceOf(LeaseBusyError);
    } finally {
      await lease.release();
    }
    await expect(service.run(key, () => 'ran')).resolves.toBe('ran');
  });

  it('a semaphore (limit n): n holders, each a slot of its own; the next waits for a freed slot', async () => {
    const { service } = subject();
    const key = freshKey('semaphore');
    const held = [(await service.tryAcquire(key, { limit: 2 }))!, (await service.tryAcquire(key, { limit: 2 }))!];
    expect(held.map((lease) => lease.slot)).toEqual([0, 1]);
    expect(held[1].fencingToken).toBeGreaterThan(held[0].fencingToken);
    await expect(service.tryAcquire(key, { limit: 2 })).resolves.toBeNull();
    const full = await service.run(key, () => 'ran', { limit: 2 }).catch((error: unknown) => error);
    expect(full).toBeInstanceOf(LeaseBusyError);
    expect((full as Error).message).toMatch(new RegExp(`^All 2 slots of "${key}" are held`));
    const rows = (await service.list(key)).filter((row) => row.state === 'held');
    expect(rows.map((row) => [row.targetKey, row.slot])).toEqual([
      [key, 0],
      [key, 1],
    ]);
    const next = service.acquire(key, { limit: 2, onBusy: { wait: { timeoutMs: 30_000 } } });
    await until(async () => (await waitingRows(service, key)) === 1, 'a waiter in line');
    await held[1].release();
    const granted = await next;
    expect(granted.slot).toBe(1);
    expect(granted.fencingToken).toBeGreaterThan(held[1].fencingToken);
    await expect(granted.fenced(async () => 'written')).resolves.toBe('written');
    await Promise.all([held[0].release(), granted.release()]);
  });

  it('a semaphore: another limit for a held key is a LeaseLimitConflictError', async () => {
    const { service } = subject();
    const key = freshKey('limits');
    const lease = (await service.tryAcquire(key, { limit: 3 }))!;
    await expect(service.tryAcquire(key, { limit: 2 })).rejects.toBeInstanceOf(LeaseLimitConflictError);
    // A call without a limit finds the key busy while a slot is held: never granted beside the slots' holders.
    expect(await service.tryAcquire(key)).toBeNull();
    await expect(service.run(key, () => 'ran beside the slots')).rejects.toBeInstanceOf(LeaseBusyError);
    await expect(service.acquire(key, { limit: 4, onBusy: { wait: { timeoutMs: 1_000 } } })).rejects.toMatchObject({
      limit: 4,
      heldLimit: 3,
    });
    await lease.release();
    const single = (await service.tryAcquire(key))!;
    await expect(service.tryAcquire(key, { limit: 3 })).rejects.toMatchObject({ heldLimit: 1 });
    await single.release();
  });

  it('grants waiters by priority, first come first served within a priority', async () => {
    const { service } = subject();
    const key = freshKey('order');
    const holder = (await service.tryAcquire(key))!;
    const order: string[] = [];
    const waits: Promise<void>[] = [];
    const wait = async (name: string, priority: number) => {
      const lease = await service.acquire(key, { priority, onBusy: { wait: { timeoutMs: 30_000 } } });
      order.push(name);
      await lease.release();
    };
    let queued = 0;
    for (const [name, priority] of [
      ['low-1', 1],
      ['high-1', 5],
      ['low-2', 1],
      ['high-2', 5],
    ] as const) {
      waits.push(wait(name, priority));
      queued += 1;
      const expected = queued;
      await until(async () => (await waitingRows(service, key)) === expected, `${expected} waiters in line`);
    }
    await holder.release();
    await Promise.all(waits);
    expect(order).toEqual(['high-1', 'high-2', 'low-1', 'low-2']);
  });

  it('ends a wait with LeaseWaitTimeoutError after waitTimeoutMs', async () => {
    const { service } = subject();
    const key = freshKey('timeout');
    const holder = (await service.tryAcquire(key))!;
    try {
      const error = await service.acquire(key, { onBusy: { wait: { timeoutMs: 300 } } }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LeaseWaitTimeoutError);
      expect((error as LeaseWaitTimeoutError).waitTimeoutMs).toBe(300);
      expect(service.waitingCount()).toBe(0);
    } finally {
      await holder.release();
    }
  });

  it('a wait that times out or is aborted leaves nothing behind: no waiter row, the next caller is not held back', async () => {
    const { service } = subject();
    const key = freshKey('leave');
    const holder = (await service.tryAcquire(key))!;
    try {
      const timedOut = service.acquire(key, { onBusy: { wait: { timeoutMs: 200 } } }).catch((e: unknown) => e);
      const controller = new AbortController();
      const aborting = service
        .acquire(key, { signal: controller.signal, onBusy: { wait: { timeoutMs: 30_000 } } })
        .catch((e: unknown) => e);
      await until(async () => (await waitingRows(service, key)) === 2, 'both waiters queued');
      controller.abort(new Error('caller gave up'));
      await expect(aborting).resolves.toMatchObject({ message: 'caller gave up' });
      await expect(timedOut).resolves.toBeInstanceOf(LeaseWaitTimeoutError);
      expect(service.waitingCount()).toBe(0);
      await until(async () => (await waitingRows(service, key)) === 0, 'the waiter rows gone');
    } finally {
      await holder.release();
    }
    // No waiter left in line (a live one of priority 0 would keep a newcomer out): granted at once.
    const next = await service.tryAcquire(key);
    expect(next).not.toBeNull();
    await next!.release();
  });

  it('is reentrant within one call chain: the inner call shares the outer lease', async () => {
    const { service } = subject();
    const key = freshKey('reentrant');
    const tokens = await service.run(key, async (outer) => {
      const inner = await service.run(key, (lease) => lease.fencingToken);
      const borrowed = await service.tryAcquire(key);
      expect(service.current()).toBe(outer);
      return [outer.fencingToken, inner, borrowed?.fencingToken];
    });
    expect(tokens[1]).toBe(tokens[0]);
    expect(tokens[2]).toBe(tokens[0]);
    expect(service.heldLeases()).toHaveLength(0);
  });

  it('gives a later acquisition of a key a larger fencing token', async () => {
    const { service } = subject();
    const key = freshKey('token');
    const first = await service.run(key, (lease) => lease.fencingToken);
    const second = await service.run(key, (lease) => lease.fencingToken);
    expect(typeof first).toBe('bigint');
    expect(second > first).toBe(true);
  });

  for (const [loss, reason] of [
    ['taken over', 'taken-over'],
    ['expired', 'renewal-deadline'],
  ] as const) {
    it(`aborts the signal of a lease ${loss} (${reason}) and refuses its fenced writes`, async () => {
      const current = subject();
      const { service } = current;
      const key = freshKey(reason);
      const lease = (await service.tryAcquire(key))!;
      let calls = 0;
      const work = async () => {
        calls += 1;
        return 'saved';
      };
      try {
        await expect(lease.fenced(work)).resolves.toBe('saved');
        await (reason === 'taken-over' ? current.takeOver(key) : current.expire(key));
        const why = await aborted(lease.signal);
        expect(why).toBeInstanceOf(LeaseLostError);
        expect((why as LeaseLostError).reason).toBe(reason);
        expect(lease.isHeld()).toBe(false);
        await expect(lease.fenced(work)).rejects.toBeInstanceOf(LeaseLostError);
        expect(calls).toBe(1);
        expect(service.heldLeases()).toHaveLength(0);
      } finally {
        await lease.release();
      }
    });
  }

  it("joins the running call with onBusy: 'join': the duplicate gets its value, the work runs once", async () => {
    const { service } = subject();
    const key = freshKey('join');
    let runs = 0;
    let letGo!: () => void;
    const gate = new Promise<void>((resolve) => (letGo = resolve));
    const work = async () => {
      runs += 1;
      await gate;
      return { report: 42 };
    };
    const first = service.run(key, work, { onBusy: 'join' });
    await until(() => service.heldLeases().length === 1, 'the first call to hold the key');
    const duplicate = service.run(key, work, { onBusy: 'join' });
    letGo();
    await expect(Promise.all([first, duplicate])).resolves.toEqual([{ report: 42 }, { report: 42 }]);
    expect(runs).toBe(1);
  });

  it('a drained key refuses a call and a join at once (LeaseDrainedError); undrained, it runs', async () => {
    const { service } = subject();
    const key = freshKey('drained');
    const operator = new LeaseOperator(service);
    await operator.drain(key, { by: 'contract', reason: 'maintenance' });
    try {
      await expect(service.run(key, () => 'ran')).rejects.toBeInstanceOf(LeaseDrainedError);
      await expect(service.run(key, () => 'ran', { onBusy: 'join' })).rejects.toBeInstanceOf(LeaseDrainedError);
    } finally {
      await operator.undrain(key, { by: 'contract', reason: 'done' });
    }
    await expect(service.run(key, () => 'ran', { onBusy: 'join' })).resolves.toBe('ran');
  });

  it('releases with the last fenced write when asked (fenced(work, { release: true }))', async () => {
    const { service } = subject();
    const key = freshKey('release-with-save');
    const lease = (await service.tryAcquire(key))!;
    await expect(lease.fenced(async () => 'saved', { release: true })).resolves.toBe('saved');
    expect(lease.isHeld()).toBe(false);
    expect(lease.signal.aborted).toBe(true);
    expect(service.heldLeases()).toHaveLength(0);
    const next = (await service.tryAcquire(key))!;
    expect(next).not.toBeNull();
    expect(next.fencingToken > lease.fencingToken).toBe(true);
    await next.release();
  });

  it('releases: the signal aborts, the lease is no longer held, the key is free', async () => {
    const { service } = subject();
    const key = freshKey('release');
    const released = new Promise<unknown>((resolve) => {
      const subscription = service.events$.subscribe((event) => {
        if (event.type === 'released' && event.targetKey === key) {
          subscription.unsubscribe();
          resolve(event);
        }
      });
    });
    const lease: Lease = (await service.tryAcquire(key))!;
    const { signal } = lease;
    await lease.release();
    await lease.release(); // idempotent
    expect(signal.aborted).toBe(true);
    expect(lease.isHeld()).toBe(false);
    expect(service.heldLeases()).toHaveLength(0);
    await expect(released).resolves.toMatchObject({ type: 'released', fencingToken: lease.fencingToken });
    const again = await service.tryAcquire(key);
    expect(again).not.toBeNull();
    await again!.release();
  });

  it('preempts a holder of lower priority: its signal aborts (preempted), the preemptor gets a larger token', async () => {
    const { service } = subject();
    const key = freshKey('preempt');
    const events: string[] = [];
    const sub = service.events$.subscribe((event) => {
      if (event.type === 'preempted') events.push(`preempted forced=${event.forced}`);
      if (event.type === 'lost') events.push(`lost ${event.reason}`);
    });
    const holder = await service.acquire(key, { priority: 1 });
    try {
      // Equal priority never preempts.
      await expect(
        service.acquire(key, { priority: 1, onBusy: { preempt: { graceMs: 0, waitTimeoutMs: 200 } } }),
      ).rejects.toBeInstanceOf(LeaseWaitTimeoutError);
      expect(holder.isHeld()).toBe(true);
      const preempting = service.acquire(key, { priority: 2, onBusy: { preempt: { graceMs: 30_000 } } });
      const reason = await aborted(holder.signal);
      expect(reason).toBeInstanceOf(LeaseLostError);
      expect((reason as LeaseLostError).reason).toBe('preempted');
      await expect(holder.fenced(async () => 'saved')).rejects.toBeInstanceOf(LeaseLostError);
      await holder.release();
      // Released since, its save is still refused as preempted (not "already released").
      const refused = await holder.fenced(async () => 'saved').catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(LeaseLostError);
      expect((refused as LeaseLostError).reason).toBe('preempted');
      expect((refused as Error).message).toMatch(/was lost \(a caller of higher priority preempted it\)/);
      const lease = await preempting;
      expect(lease.fencingToken > holder.fencingToken).toBe(true);
      // A holder that ignores its signal is taken over at the end of the grace.
      const urgent = service.acquire(key, { priority: 3, onBusy: { preempt: { graceMs: 50 } } });
      const taken = await urgent;
      expect(taken.fencingToken > lease.fencingToken).toBe(true);
      expect(lease.isHeld()).toBe(false);
      await lease.release();
      await taken.release();
      expect(events).toEqual(['lost preempted', 'preempted forced=false', 'lost preempted', 'preempted forced=true']);
    } finally {
      sub.unsubscribe();
    }
  });
}
