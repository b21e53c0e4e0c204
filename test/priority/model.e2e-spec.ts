/**
 * Model-based test of the priority line against the real database: random sequences of waits, releases, waiter
 * crashes and timed-out waits, each waiter a "process" of its own. After every step: at most one holder, the holder
 * the model expects, and the line (as list() reports it) in the model's grant order; after every release, the grant
 * went to the highest-priority, earliest-queued live waiter of the model.
 *
 * A crash must be a real one: closing a service removes its rows, and aging a row with SQL alone is undone by the
 * owner's next heartbeat. So each waiter talks to PostgreSQL through a proxy; a crash freezes the proxy (nothing of
 * that process reaches the database any more), ends its sessions, and ages its row so it is dead at once.
 */
import type { Lease } from 'nest-pg-lease';
import { Logger } from '@nestjs/common';
import fc from 'fast-check';
import { eventually, useTestDatabase } from '../support/db.js';
import type { TcpProxy } from '../support/tcp-proxy.js';
import {
  closeParticipants,
  crashWaiter,
  holderOf,
  procsOf,
  type Proc,
  expectTimedOut,
  MODEL_OPTIONS,
  startParticipant,
  track,
  untilQueued,
} from './helpers.js';

const db = useTestDatabase('prio_model');
const proc = procsOf(db);
let observer: Proc;

interface ModelWaiter {
  name: string;
  priority: number;
  queued: number;
}

interface Model {
  holder: string | null;
  /** Live waiters, in the order they queued. */
  waiters: ModelWaiter[];
  queued: number;
}

interface Participant {
  proc: Proc;
  proxy?: TcpProxy;
  call?: ReturnType<typeof track<Lease>>;
}

interface Real {
  key: string;
  participants: Map<string, Participant>;
  holder: { name: string; lease: Lease } | null;
  created: number;
}

/** The model's grant order: highest priority first, then first queued. */
function grantOrder(model: Readonly<Model>): ModelWaiter[] {
  return [...model.waiters].sort((a, b) => b.priority - a.priority || a.queued - b.queued);
}

async function participant(real: Real, prefix: string, proxied: boolean): Promise<Participant> {
  const name = `${prefix}${++real.created}`;
  const entry: Participant = await startParticipant(db, name, proxied);
  real.participants.set(name, entry);
  return entry;
}

const executed = new Map<string, number>();

/** Checks that hold after every step. */
async function checkInvariants(model: Readonly<Model>, real: Real, step: string): Promise<void> {
  executed.set(step, (executed.get(step) ?? 0) + 1);
  const heldLocally = [...real.participants.entries()].flatMap(([name, p]) =>
    p.proc.service
      .heldLeases()
      .filter((lease) => lease.targetKey === real.key && lease.isHeld())
      .map(() => name),
  );
  expect(heldLocally.length).toBeLessThanOrEqual(1);
  expect(heldLocally).toEqual(model.holder ? [model.holder] : []);
  const owner = await holderOf(db.admin, real.key);
  expect(owner).toBe(model.holder ? real.participants.get(model.holder)!.proc.owner : null);
  const line = (await observer.service.list(real.key))
    .filter((s) => s.state === 'waiting' && s.live)
    .map((s) => s.owner);
  expect(line).toEqual(grantOrder(model).map((w) => real.participants.get(w.name)!.proc.owner));
  for (const waiter of model.waiters) expect(real.participants.get(waiter.name)!.call!.settled()).toBe(false);
}

class WaitCommand implements fc.AsyncCommand<Model, Real> {
  constructor(readonly priority: number) {}
  check = (model: Readonly<Model>) => model.waiters.length < 6;
  async run(model: Model, real: Real): Promise<void> {
    const entry = await participant(real, 'w', true);
    entry.call = track(
      entry.proc.service.acquire(real.key, { priority: this.priority, onBusy: { wait: { timeoutMs: 120_000 } } }),
    );
    if (model.holder === null) {
      real.holder = { name: entry.proc.name, lease: await entry.call.promise };
      model.holder = entry.proc.name;
    } else {
      await untilQueued(db.admin, real.key, entry.proc.owner);
      model.waiters.push({ name: entry.proc.name, priority: this.priority, queued: model.queued++ });
    }
    await checkInvariants(model, real, 'wait');
  }
  toString = () => `wait(p${this.priority})`;
}

class ReleaseCommand implements fc.AsyncCommand<Model, Real> {
  check = (model: Readonly<Model>) => model.holder !== null;
  async run(model: Model, real: Real): Promise<void> {
    const next = grantOrder(model)[0];
    await real.holder!.lease.release();
    real.holder = null;
    model.holder = null;
    if (next) {
      const call = real.participants.get(next.name)!.call!;
      await eventually(
        () => call.settled(),
        Boolean,
        `grant to ${next.name} (p${next.priority}, queued #${next.queued})`,
        10_000,
      );
      expect(call.error).toBeUndefined();
      real.holder = { name: next.name, lease: call.value! };
      model.holder = next.name;
      model.waiters = model.waiters.filter((w) => w !== next);
    }
    await checkInvariants(model, real, 'release');
  }
  toString = () => 'release';
}

class CrashCommand implements fc.AsyncCommand<Model, Real> {
  constructor(readonly index: number) {}
  check = (model: Readonly<Model>) => model.waiters.length > 0;
  async run(model: Model, real: Real): Promise<void> {
    const victim = model.waiters[this.index % model.waiters.length];
    const { proc, proxy } = real.participants.get(victim.name)!;
    await crashWaiter(db.admin, real.key, proc, proxy!);
    model.waiters = model.waiters.filter((w) => w !== victim);
    await checkInvariants(model, real, 'crash');
  }
  toString = () => `crash(#${this.index})`;
}

class TimeoutCommand implements fc.AsyncCommand<Model, Real> {
  constructor(readonly priority: number) {}
  check = () => true;
  async run(model: Model, real: Real): Promise<void> {
    const entry = await participant(real, 't', false);
    const call = entry.proc.service.acquire(real.key, {
      priority: this.priority,
      onBusy: { wait: { timeoutMs: 300 } },
    });
    if (model.holder === null) {
      real.holder = { name: entry.proc.name, lease: await call };
      model.holder = entry.proc.name;
    } else {
      await expectTimedOut(call, db.admin, real.key, entry.proc.owner);
    }
    await checkInvariants(model, real, 'timeout');
  }
  toString = () => `timeout(p${this.priority})`;
}

beforeAll(async () => {
  // Crashed processes log their failed statements when they are torn down; expected here, so keep errors only.
  Logger.overrideLogger(['error']);
  observer = await proc('observer', MODEL_OPTIONS);
});

test('grants follow priority then first-queued order, with at most one holder, under waits, releases, crashes and timeouts', async () => {
  const priority = fc.integer({ min: 1, max: 3 });
  const wait = priority.map((p) => new WaitCommand(p));
  const release = fc.constant(new ReleaseCommand());
  const crash = fc.nat(5).map((i) => new CrashCommand(i));
  // Listed twice or thrice to weigh them: order is only tested when several waiters are queued at a release.
  const commands = fc.commands(
    [wait, wait, wait, wait, release, release, release, crash, crash, priority.map((p) => new TimeoutCommand(p))],
    { maxCommands: 10, size: 'max' },
  );
  let run = 0;
  const started = performance.now();
  await fc.assert(
    fc.asyncProperty(commands, async (cmds) => {
      const real: Real = { key: `model:${++run}`, participants: new Map(), holder: null, created: 0 };
      const model: Model = { holder: null, waiters: [], queued: 0 };
      try {
        // Start every run with a holder, so the first waits queue.
        const first = await participant(real, 'h', true);
        real.holder = { name: first.proc.name, lease: (await first.proc.service.tryAcquire(real.key))! };
        model.holder = first.proc.name;
        await fc.asyncModelRun(() => ({ model, real }), cmds);
      } finally {
        await closeParticipants(real.participants.values());
      }
    }),
    { numRuns: 25, endOnFailure: true },
  );
  console.log(
    `${run} runs, commands executed: ${[...executed].map(([step, n]) => `${step} ${n}`).join(', ')}, in ${((performance.now() - started) / 1_000).toFixed(1)} s`,
  );
}, 240_000);
