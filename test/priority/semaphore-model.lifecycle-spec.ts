/**
 * Model-based test of semaphores (`limit` n, issue 30) against the real database: the priority line's model
 * (model.e2e-spec.ts) with n slots. Random sequences of waits, releases (of any holder), waiter crashes and timed-out
 * waits, each participant a "process" of its own; after every step, compared with a reference model of n slots:
 * at most n holders, exactly the model's (locally and in the database, each on a slot of its own, under the key's
 * limit), and the line (as list() reports it) in the model's grant order; after every release, the freed slot went
 * to the highest-priority, earliest-queued live waiter of the model, and a fencing token larger than that slot's
 * previous grant.
 *
 * A crash is a real one, as in the single holder's model: the process's proxy freezes, its sessions end, its waiter
 * row is aged dead.
 */
import type { Lease } from 'nest-pg-lease';
import { Logger } from '@nestjs/common';
import fc from 'fast-check';
import { eventually, useTestDatabase } from '../support/db.js';
import type { TcpProxy } from '../support/tcp-proxy.js';
import {
  closeParticipants,
  crashWaiter,
  procsOf,
  type Proc,
  expectTimedOut,
  MODEL_OPTIONS,
  startParticipant,
  track,
  untilQueued,
} from './helpers.js';

const db = useTestDatabase('sem_model');
const proc = procsOf(db);
let observer: Proc;

interface ModelWaiter {
  name: string;
  priority: number;
  queued: number;
}

interface Model {
  readonly limit: number;
  /** Holders, in the order they were granted. */
  holders: string[];
  /** Live waiters, in the order they queued. */
  waiters: ModelWaiter[];
  queued: number;
}

interface Participant {
  proc: Proc;
  proxy?: TcpProxy;
  call?: ReturnType<typeof track<Lease>>;
  lease?: Lease;
}

interface Real {
  key: string;
  participants: Map<string, Participant>;
  created: number;
  /** The largest fencing token granted per slot so far. */
  tokens: Map<number, bigint>;
}

function grantOrder(model: Readonly<Model>): ModelWaiter[] {
  return [...model.waiters].sort((a, b) => b.priority - a.priority || a.queued - b.queued);
}

async function participant(real: Real, prefix: string, proxied: boolean): Promise<Participant> {
  const name = `${prefix}${++real.created}`;
  const entry: Participant = await startParticipant(db, name, proxied);
  real.participants.set(name, entry);
  return entry;
}

/** A grant: the lease is a slot under the limit whose fencing token exceeds that slot's previous grants. */
function granted(real: Real, entry: Participant, lease: Lease, limit: number): void {
  expect(lease.slot).toBeGreaterThanOrEqual(0);
  expect(lease.slot).toBeLessThan(limit);
  const before = real.tokens.get(lease.slot!);
  if (before !== undefined) expect(lease.fencingToken).toBeGreaterThan(before);
  real.tokens.set(lease.slot!, lease.fencingToken);
  entry.lease = lease;
}

const executed = new Map<string, number>();

async function checkInvariants(model: Readonly<Model>, real: Real, step: string): Promise<void> {
  executed.set(step, (executed.get(step) ?? 0) + 1);
  const heldLocally = [...real.participants.entries()].flatMap(([name, p]) =>
    p.proc.service
      .heldLeases()
      .filter((lease) => lease.targetKey === real.key && lease.isHeld())
      .map((lease) => ({ name, slot: lease.slot })),
  );
  expect(heldLocally.length).toBeLessThanOrEqual(model.limit);
  expect(heldLocally.map((held) => held.name).sort()).toEqual([...model.holders].sort());
  expect(new Set(heldLocally.map((held) => held.slot)).size).toBe(heldLocally.length);
  const { rows } = await db.admin.query<{ owner: string; slot_limit: number }>(
    `SELECT owner, slot_limit FROM job_lease WHERE target_id = $1 AND slot > 0 AND lease_token IS NOT NULL`,
    [real.key],
  );
  expect(rows.map((row) => row.owner).sort()).toEqual(
    model.holders.map((name) => real.participants.get(name)!.proc.owner).sort(),
  );
  expect(rows.every((row) => row.slot_limit === model.limit)).toBe(true);
  const listed = await observer.service.list(real.key);
  expect(listed.filter((s) => s.state === 'held').length).toBe(model.holders.length);
  const line = listed.filter((s) => s.state === 'waiting' && s.live).map((s) => s.owner);
  expect(line).toEqual(grantOrder(model).map((w) => real.participants.get(w.name)!.proc.owner));
  for (const waiter of model.waiters) expect(real.participants.get(waiter.name)!.call!.settled()).toBe(false);
}

class WaitCommand implements fc.AsyncCommand<Model, Real> {
  constructor(readonly priority: number) {}
  check = (model: Readonly<Model>) => model.waiters.length < 5;
  async run(model: Model, real: Real): Promise<void> {
    const entry = await participant(real, 'w', true);
    entry.call = track(
      entry.proc.service.acquire(real.key, {
        limit: model.limit,
        priority: this.priority,
        onBusy: { wait: { timeoutMs: 120_000 } },
      }),
    );
    // A free slot with no one in line is granted at once; otherwise the call queues.
    if (model.holders.length < model.limit) {
      expect(model.waiters).toEqual([]);
      granted(real, entry, await entry.call.promise, model.limit);
      model.holders.push(entry.proc.name);
    } else {
      await untilQueued(db.admin, real.key, entry.proc.owner);
      model.waiters.push({ name: entry.proc.name, priority: this.priority, queued: model.queued++ });
    }
    await checkInvariants(model, real, 'wait');
  }
  toString = () => `wait(p${this.priority})`;
}

class ReleaseCommand implements fc.AsyncCommand<Model, Real> {
  constructor(readonly index: number) {}
  check = (model: Readonly<Model>) => model.holders.length > 0;
  async run(model: Model, real: Real): Promise<void> {
    const name = model.holders[this.index % model.holders.length];
    const holder = real.participants.get(name)!;
    const next = grantOrder(model)[0];
    await holder.lease!.release();
    holder.lease = undefined;
    model.holders = model.holders.filter((other) => other !== name);
    if (next) {
      const entry = real.participants.get(next.name)!;
      await eventually(() => entry.call!.settled(), Boolean, `grant to ${next.name} (p${next.priority})`, 10_000);
      expect(entry.call!.error).toBeUndefined();
      granted(real, entry, entry.call!.value!, model.limit);
      model.holders.push(next.name);
      model.waiters = model.waiters.filter((w) => w !== next);
    }
    await checkInvariants(model, real, 'release');
  }
  toString = () => `release(#${this.index})`;
}

class CrashCommand implements fc.AsyncCommand<Model, Real> {
  constructor(readonly index: number) {}
  check = (model: Readonly<Model>) => model.waiters.length > 0;
  async run(model: Model, real: Real): Promise<void> {
    const victim = model.waiters[this.index % model.waiters.length];
    const { proc: victimProc, proxy } = real.participants.get(victim.name)!;
    await crashWaiter(db.admin, real.key, victimProc, proxy!);
    model.waiters = model.waiters.filter((w) => w !== victim);
    await checkInvariants(model, real, 'crash');
  }
  toString = () => `crash(#${this.index})`;
}

/** A newcomer's one attempt: granted only with a free slot and nobody in line, whatever its priority. */
class TryCommand implements fc.AsyncCommand<Model, Real> {
  constructor(readonly priority: number) {}
  check = () => true;
  async run(model: Model, real: Real): Promise<void> {
    const entry = await participant(real, 'n', false);
    const lease = await entry.proc.service.tryAcquire(real.key, { limit: model.limit, priority: this.priority });
    if (model.holders.length < model.limit && model.waiters.length === 0) {
      expect(lease).not.toBeNull();
      granted(real, entry, lease!, model.limit);
      model.holders.push(entry.proc.name);
    } else {
      expect(lease).toBeNull();
    }
    await checkInvariants(model, real, 'try');
  }
  toString = () => `try(p${this.priority})`;
}

class TimeoutCommand implements fc.AsyncCommand<Model, Real> {
  constructor(readonly priority: number) {}
  check = () => true;
  async run(model: Model, real: Real): Promise<void> {
    const entry = await participant(real, 't', false);
    const call = entry.proc.service.acquire(real.key, {
      limit: model.limit,
      priority: this.priority,
      onBusy: { wait: { timeoutMs: 300 } },
    });
    if (model.holders.length < model.limit) {
      granted(real, entry, await call, model.limit);
      model.holders.push(entry.proc.name);
    } else {
      await expectTimedOut(call, db.admin, real.key, entry.proc.owner);
    }
    await checkInvariants(model, real, 'timeout');
  }
  toString = () => `timeout(p${this.priority})`;
}

beforeAll(async () => {
  Logger.overrideLogger(['error']);
  observer = await proc('observer', MODEL_OPTIONS);
});

test('n slots: grants follow priority then first-queued order, never more than n holders, under waits, releases, crashes and timeouts', async () => {
  const priority = fc.integer({ min: 1, max: 3 });
  const wait = priority.map((p) => new WaitCommand(p));
  const release = fc.nat(5).map((i) => new ReleaseCommand(i));
  const crash = fc.nat(5).map((i) => new CrashCommand(i));
  const commands = fc.commands(
    [
      wait,
      wait,
      wait,
      wait,
      release,
      release,
      release,
      crash,
      priority.map((p) => new TimeoutCommand(p)),
      fc.integer({ min: 1, max: 9 }).map((p) => new TryCommand(p)),
    ],
    { maxCommands: 12, size: 'max' },
  );
  let run = 0;
  const started = performance.now();
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 2, max: 3 }), commands, async (limit, cmds) => {
      const real: Real = { key: `sem-model:${++run}`, participants: new Map(), created: 0, tokens: new Map() };
      const model: Model = { limit, holders: [], waiters: [], queued: 0 };
      try {
        // Start every run with the slots full, so the first waits queue.
        for (let slot = 0; slot < limit; slot++) {
          const first = await participant(real, 'h', true);
          granted(real, first, (await first.proc.service.tryAcquire(real.key, { limit }))!, limit);
          model.holders.push(first.proc.name);
        }
        await fc.asyncModelRun(() => ({ model, real }), cmds);
      } finally {
        await closeParticipants(real.participants.values());
      }
    }),
    { numRuns: 15, endOnFailure: true },
  );
  console.log(
    `${run} runs, commands executed: ${[...executed].map(([step, n]) => `${step} ${n}`).join(', ')}, in ${((performance.now() - started) / 1_000).toFixed(1)} s`,
  );
}, 300_000);
