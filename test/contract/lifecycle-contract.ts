/**
 * The lease contract's cases of a lease's whole life beyond acquisition (listing, close() and its drain, hold tails,
 * events$, forced preemption, aging), run like lease-contract.ts against the one engine over each backend.
 */
import { type Lease, type LeaseEvent, LeaseBusyError, LeaseLostError, LeaseShutdownError } from 'nest-pg-lease';
import { aborted, type ContractSubject, freshKey, until, waitingRows } from './lease-contract.js';

export function lifecycleContract(subject: () => ContractSubject): void {
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
    // The line's order is under test, not the waiters' liveness: a waiter's timeout well past the test timings' 600 ms,
    // so a loaded machine that delays a waiter's renewal does not make it dead (no position) in the snapshot.
    const { service, close } = await subject().open({ timing: { agingIntervalMs, waiterTimeoutMs: 10_000 } });
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
