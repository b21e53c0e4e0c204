/**
 * The lease contract: one set of cases run against the one engine over each backend: the memory backend of
 * `nest-pg-lease/testing` (memory.e2e-spec.ts, in the unit tier) and PostgreSQL (postgres.e2e-spec.ts), so that a
 * unit test on the in-memory service learns what production does. Each case waits for outcomes, never for time.
 */
import {
  type Lease,
  type LeaseEvent,
  LeaseBusyError,
  LeaseDrainedError,
  LeaseLimitConflictError,
  LeaseLostError,
  type LeaseModuleOptions,
  LeaseOperator,
  type LeaseService,
  LeaseShutdownError,
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

  it('lists the holder and its waiters in grant order, JSON-safe', async () => {
    const { service } = subject();
    const key = freshKey('list');
    const holder = (await service.tryAcquire(key))!;
    const waits = [
      service.acquire(key, { priority: 1, onBusy: { wait: { timeoutMs: 30_000 } } }),
      service.acquire(key, { priority: 7, onBusy: { wait: { timeoutMs: 30_000 } } }),
    ];
    try {
      await until(async () => (await waitingRows(service, key)) === 2, 'two waiters in line');
      const rows = await service.list(key);
      expect(rows).toHaveLength(3);
      expect(rows[0]).toMatchObject({
        targetKey: key,
        state: 'held',
        owner: service.options.owner,
        mine: true,
        fencingToken: holder.fencingToken,
        live: true,
      });
      expect(rows.slice(1)).toMatchObject([
        { targetKey: key, state: 'waiting', mine: true, priority: 7, position: 1, live: true },
        { targetKey: key, state: 'waiting', mine: true, priority: 1, position: 2, live: true },
      ]);
      const json = JSON.parse(JSON.stringify(rows)) as Array<{ fencingToken?: string }>;
      expect(json[0].fencingToken).toBe(String(holder.fencingToken));
      for (const row of rows) {
        expect(Object.keys(row).sort()).toEqual(
          expect.arrayContaining(['ageMs', 'effectivePriority', 'live', 'sinceHeartbeatMs', 'timeoutMs']),
        );
      }
    } finally {
      await holder.release();
      await Promise.all(waits.map(async (wait) => (await wait).release()));
    }
  });

  it('close() drains: a run in progress keeps its lease and saves, new calls are refused, then it closes', async () => {
    // A grace far longer than the case: the close ends when the run does, not when the grace does.
    const { service, close } = await subject().open({ timing: { shutdownGraceMs: 60_000 } });
    const key = freshKey('drain');
    let letGo!: () => void;
    const gate = new Promise<void>((resolve) => (letGo = resolve));
    let held!: Lease;
    const running = service.run(key, async (lease) => {
      held = lease;
      await gate;
      return lease.fenced(async () => 'saved');
    });
    await until(() => service.heldLeases().length === 1, 'the run to hold its key');
    const closing = close();
    // Refused from the moment the close began (the real engine refuses before any await of its close).
    await expect(service.tryAcquire(freshKey('after-close'))).rejects.toBeInstanceOf(LeaseShutdownError);
    expect({ aborted: held.signal.aborted, held: held.isHeld() }).toEqual({ aborted: false, held: true });
    letGo();
    await expect(running).resolves.toBe('saved');
    await closing;
    expect(service.heldLeases()).toHaveLength(0);
  });

  it('close() past shutdownGraceMs: a run still going is told with LeaseShutdownError, its saves refused', async () => {
    const { service, close } = await subject().open({ timing: { shutdownGraceMs: 200 } });
    const key = freshKey('drain-grace');
    let held!: Lease;
    const refused = service
      .run(key, async (lease) => {
        held = lease;
        // Ignores the drain: runs until told to stop, then tries to save.
        await aborted(lease.signal);
        return lease.fenced(async () => 'saved');
      })
      .catch((error: unknown) => error);
    await until(() => service.heldLeases().length === 1, 'the run to hold its key');
    await close();
    expect(held.signal.reason).toBeInstanceOf(LeaseShutdownError);
    expect(await refused).toBeInstanceOf(LeaseLostError);
    expect(service.heldLeases()).toHaveLength(0);
  });

  it('a hold tail (holdAtLeastMs) keeps the key taken after the release until it ends; then the next caller gets it', async () => {
    const { service } = subject();
    const key = freshKey('hold-tail');
    const holdMs = 1_000;
    const asked = Date.now();
    const lease = (await service.tryAcquire(key, { holdAtLeastMs: holdMs }))!;
    expect(lease).not.toBeNull();
    await lease.release();
    expect(lease.isHeld()).toBe(false);
    // Released, but its tail runs: the key stays taken for a newcomer and for a run.
    await expect(service.tryAcquire(key)).resolves.toBeNull();
    await expect(service.run(key, () => 'ran')).rejects.toBeInstanceOf(LeaseBusyError);
    expect(Date.now() - asked).toBeLessThan(holdMs); // the checks above did fall within the tail
    // A waiter is granted once the tail ends — not before.
    const next = await service.acquire(key, { onBusy: { wait: { timeoutMs: 30_000 } } });
    expect(Date.now() - asked).toBeGreaterThanOrEqual(holdMs);
    expect(next.fencingToken > lease.fencingToken).toBe(true);
    await next.release();
    // Without a tail of its own, its release frees the key at once.
    const after = await service.tryAcquire(key);
    expect(after).not.toBeNull();
    await after!.release();
  });

  it('events$: grants, a release, losses and a takeover emit the documented events, with the documented fields', async () => {
    const current = subject();
    const { service } = current;
    const key = freshKey('events');
    const keyTemplate = 'contract:events:{id}';
    const seen: LeaseEvent[] = [];
    // Heartbeats ('renewed') come on their own timer: not part of this sequence.
    const sub = service.events$.subscribe((event) => {
      if ('targetKey' in event && event.targetKey === key && event.type !== 'renewed') seen.push(event);
    });
    const fields = (event: LeaseEvent) => [event.type, Object.keys(event).sort()];
    try {
      const first = (await service.tryAcquire(key, { priority: 3, keyTemplate }))!;
      await first.release();
      const second = (await service.tryAcquire(key, { priority: 3, keyTemplate }))!;
      await current.expire(key);
      await aborted(second.signal);
      await until(() => seen.some((event) => event.type === 'lost'), 'the first lost event');
      // The expired row, not released by its holder, is taken over by the next grant.
      const third = (await service.tryAcquire(key, { priority: 3, keyTemplate }))!;
      await second.release(); // too late: leaves the new grant alone
      expect(third.isHeld()).toBe(true);
      await current.takeOver(key);
      await aborted(third.signal);
      await until(() => seen.filter((event) => event.type === 'lost').length === 2, 'the second lost event');
      await third.release();
      const common = { targetKey: key, keyTemplate, at: expect.any(Date) };
      const granted = { ...common, type: 'acquired', priority: 3, owner: service.options.owner };
      const ended = {
        ...common,
        type: 'acquire-ended',
        priority: 3,
        outcome: 'acquired',
        durationMs: expect.any(Number),
      };
      expect(seen).toEqual([
        { ...granted, fencingToken: first.fencingToken },
        ended,
        { ...common, type: 'released', fencingToken: first.fencingToken, heldMs: expect.any(Number) },
        { ...granted, fencingToken: second.fencingToken },
        ended,
        {
          ...common,
          type: 'lost',
          fencingToken: second.fencingToken,
          reason: 'renewal-deadline',
          heldMs: expect.any(Number),
        },
        { ...granted, type: 'taken-over', fencingToken: third.fencingToken, previousOwner: service.options.owner },
        { ...ended, outcome: 'taken-over' },
        { ...common, type: 'lost', fencingToken: third.fencingToken, reason: 'taken-over', heldMs: expect.any(Number) },
      ]);
      // Exactly the documented fields (lease-event.interface.ts): no slot on a key's own row, no tokens.
      expect(seen.map(fields)).toEqual([
        ['acquired', ['at', 'fencingToken', 'keyTemplate', 'owner', 'priority', 'targetKey', 'type']],
        ['acquire-ended', ['at', 'durationMs', 'keyTemplate', 'outcome', 'priority', 'targetKey', 'type']],
        ['released', ['at', 'fencingToken', 'heldMs', 'keyTemplate', 'targetKey', 'type']],
        ['acquired', ['at', 'fencingToken', 'keyTemplate', 'owner', 'priority', 'targetKey', 'type']],
        ['acquire-ended', ['at', 'durationMs', 'keyTemplate', 'outcome', 'priority', 'targetKey', 'type']],
        ['lost', ['at', 'fencingToken', 'heldMs', 'keyTemplate', 'reason', 'targetKey', 'type']],
        [
          'taken-over',
          ['at', 'fencingToken', 'keyTemplate', 'owner', 'previousOwner', 'priority', 'targetKey', 'type'],
        ],
        ['acquire-ended', ['at', 'durationMs', 'keyTemplate', 'outcome', 'priority', 'targetKey', 'type']],
        ['lost', ['at', 'fencingToken', 'heldMs', 'keyTemplate', 'reason', 'targetKey', 'type']],
      ]);
      for (const event of seen) {
        if ('heldMs' in event) expect(event.heldMs).toBeGreaterThanOrEqual(0);
        if (event.type === 'acquire-ended') expect(event.durationMs).toBeGreaterThanOrEqual(0);
      }
    } finally {
      sub.unsubscribe();
    }
  });

  it('forced preemption: a holder that does not yield is taken over at the grace end; its fenced writes are refused', async () => {
    const { service } = subject();
    const key = freshKey('preempt-forced');
    const graceMs = 300;
    const preempted: LeaseEvent[] = [];
    const grants: string[] = [];
    const sub = service.events$.subscribe((event) => {
      if (!('targetKey' in event) || event.targetKey !== key) return;
      if (event.type === 'preempted') preempted.push(event);
      if (['acquired', 'taken-over', 'lost', 'preempted', 'released'].includes(event.type)) grants.push(event.type);
    });
    const holder = await service.acquire(key, { priority: 1 });
    let writes = 0;
    let taken: Lease | undefined;
    const save = async () => {
      writes += 1;
      return 'saved';
    };
    try {
      await expect(holder.fenced(save)).resolves.toBe('saved');
      const asked = Date.now();
      // The holder never releases: only the end of the grace hands the key over.
      taken = await service.acquire(key, { priority: 2, onBusy: { preempt: { graceMs } } });
      expect(Date.now() - asked).toBeGreaterThanOrEqual(graceMs);
      expect(holder.signal.aborted).toBe(true);
      expect(holder.signal.reason).toMatchObject({ reason: 'preempted' });
      expect(holder.isHeld()).toBe(false);
      expect(taken.fencingToken > holder.fencingToken).toBe(true);
      const refused = await holder.fenced(save).catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(LeaseLostError);
      expect((refused as LeaseLostError).reason).toBe('preempted');
      expect(writes).toBe(1);
      expect(preempted).toEqual([
        expect.objectContaining({
          fencingToken: taken.fencingToken,
          previousFencingToken: holder.fencingToken,
          priority: 2,
          previousPriority: 1,
          forced: true,
        }),
      ]);
      // A preemption is no takeover of an expired lease: the preemptor's grant is an `acquired` event, then `preempted`.
      expect(grants).toEqual(['acquired', 'lost', 'acquired', 'preempted']);
      // The old holder's late release leaves the preemptor's grant alone.
      await holder.release();
      expect(taken.isHeld()).toBe(true);
      await expect(service.tryAcquire(key)).resolves.toBeNull();
      await expect(taken.fenced(async () => 'written')).resolves.toBe('written');
      const [row] = await service.list(key);
      expect(row).toMatchObject({ state: 'held', fencingToken: taken.fencingToken, priority: 2 });
    } finally {
      sub.unsubscribe();
      await holder.release();
      await taken?.release();
    }
  });

  it('aging (agingIntervalMs): a waiter gains one effective priority per interval waited and is served by it', async () => {
    const agingIntervalMs = 100;
    const { service, close } = await subject().open({ timing: { agingIntervalMs } });
    const key = freshKey('aging');
    const order: string[] = [];
    const wait = async (name: string, priority: number) => {
      const lease = await service.acquire(key, { priority, onBusy: { wait: { timeoutMs: 30_000 } } });
      order.push(name);
      await lease.release();
    };
    const holder = (await service.tryAcquire(key))!;
    const waits: Promise<void>[] = [];
    try {
      waits.push(wait('old, priority 0', 0));
      const effective = async () => (await service.list(key)).find((row) => row.state === 'waiting')?.effectivePriority;
      // Three intervals waited: effective priority 3 (the database clock's, or the process's, the same rule).
      await until(async () => ((await effective()) ?? 0) >= 3, 'the waiter to age to 3', 5_000);
      waits.push(wait('new, priority 2', 2));
      await until(async () => (await waitingRows(service, key)) === 2, 'both waiters in line');
      const line = (await service.list(key)).filter((row) => row.state === 'waiting');
      // Queued three intervals earlier, the old waiter stays ahead of the new one whatever both wait since.
      expect(line.map((row) => [row.priority, row.position])).toEqual([
        [0, 1],
        [2, 2],
      ]);
      expect(line[0].effectivePriority).toBeGreaterThan(line[1].effectivePriority);
      for (const row of line) {
        // One per interval waited since it first queued (the row's age), within one interval's rounding.
        const aged = row.priority + Math.floor(row.ageMs / agingIntervalMs);
        expect(Math.abs(row.effectivePriority - aged)).toBeLessThanOrEqual(1);
      }
    } finally {
      await holder.release();
      await Promise.all(waits);
      await close();
    }
    expect(order).toEqual(['old, priority 0', 'new, priority 2']);
  });
}
