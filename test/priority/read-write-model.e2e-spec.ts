/**
 * Model-based test of read-write leases (docs/read-write.md) against the real database, in the style of the
 * semaphores' (semaphore-model.lifecycle-spec.ts): random sequences of shared and exclusive waits, one-shot attempts
 * and releases (of any holder), spread over three "processes", compared after every step with a reference model:
 * - the holders are exactly the model's (locally and in the database: readers' rows and the writer's row), never a
 *   writer beside anyone;
 * - the line (as list() reports it) is the model's grant order (priority, then first queued);
 * - after a release the model grants its head while the head can hold (a reader while no writer holds, a writer while
 *   nobody holds), so the readers directly behind a granted reader come in with it;
 * - a newcomer is granted only when its mode can hold and no waiter of its rank or above is in line (a waiting writer
 *   keeps later readers out);
 * - a writer's fencing token is above every token granted before it, a reader's above the last writer's.
 * Its negative control: the same runs against a model without writer preference must fail.
 */
import { Logger } from '@nestjs/common';
import fc from 'fast-check';
import type { Lease } from 'nest-pg-lease';
import { eventually, useTestDatabase } from '../support/db.js';
import { MODEL_OPTIONS, procsOf, type Proc, track, waiterRows } from './helpers.js';

const db = useTestDatabase('rw_model');
const proc = procsOf(db);
const procs: Proc[] = [];

type Mode = 'shared' | 'exclusive';

interface ModelCall {
  name: string;
  mode: Mode;
  priority: number;
  queued: number;
}

interface Model {
  holders: ModelCall[];
  waiters: ModelCall[];
  queued: number;
  /** The rule under test; false: the negative control's model (newcomer readers pass a waiting writer). */
  readonly preference: boolean;
}

interface Real {
  key: string;
  calls: Map<string, ReturnType<typeof track<Lease>>>;
  leases: Map<string, Lease>;
  created: number;
  /** Every token granted so far, and the last writer's. */
  top: bigint;
  lastWriter: bigint;
}

const grantOrder = (model: Readonly<Model>) =>
  [...model.waiters].sort((a, b) => b.priority - a.priority || a.queued - b.queued);

const canHold = (model: Readonly<Model>, mode: Mode) =>
  mode === 'shared' ? model.holders.every((h) => h.mode === 'shared') : model.holders.length === 0;

/** A newcomer's grant: its mode can hold, and no waiter of its rank or above is in line. */
function newcomerGranted(model: Readonly<Model>, mode: Mode, priority: number): boolean {
  const ahead = model.waiters.filter((w) => w.priority >= priority);
  // Without preference (the negative control's model) a reader comes in whenever readers hold, line or not.
  const blocking = model.preference || mode === 'exclusive' ? ahead : [];
  return canHold(model, mode) && blocking.length === 0;
}

function granted(real: Real, name: string, lease: Lease, mode: Mode): void {
  expect(lease.mode).toBe(mode);
  if (mode === 'exclusive') expect(lease.fencingToken).toBeGreaterThan(real.top);
  else expect(lease.fencingToken).toBeGreaterThan(real.lastWriter);
  if (lease.fencingToken > real.top) real.top = lease.fencingToken;
  if (mode === 'exclusive') real.lastWriter = lease.fencingToken;
  real.leases.set(name, lease);
}

const executed = new Map<string, number>();

async function checkInvariants(model: Readonly<Model>, real: Real, step: string): Promise<void> {
  executed.set(step, (executed.get(step) ?? 0) + 1);
  const writers = model.holders.filter((h) => h.mode === 'exclusive').length;
  expect(writers === 0 || model.holders.length === 1).toBe(true);
  const held = [...real.leases.entries()].filter(([, lease]) => lease.isHeld()).map(([name]) => name);
  expect(held.sort()).toEqual(model.holders.map((h) => h.name).sort());
  const { rows } = await db.admin.query<{ slot_limit: number; n: number }>(
    `SELECT slot_limit, count(*)::int AS n FROM job_lease WHERE target_id = $1 AND lease_token IS NOT NULL
       AND updated_at + lease_timeout_ms * interval '1 millisecond' > clock_timestamp() GROUP BY slot_limit`,
    [real.key],
  );
  const inDb = Object.fromEntries(rows.map((row) => [row.slot_limit, row.n]));
  expect(inDb).toEqual({
    ...(model.holders.length > writers ? { 0: model.holders.length - writers } : {}),
    ...(writers > 0 ? { [-1]: writers } : {}),
  });
  const listed = await procs[0].service.list(real.key);
  expect(listed.filter((s) => s.state === 'waiting' && s.live).map((s) => s.priority)).toEqual(
    grantOrder(model).map((w) => w.priority),
  );
  for (const waiter of model.waiters) expect(real.calls.get(waiter.name)!.settled()).toBe(false);
}

const serviceOf = (real: Real) => procs[real.created % procs.length].service;

class WaitCommand implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly mode: Mode,
    readonly priority: number,
  ) {}
  check = (model: Readonly<Model>) => model.waiters.length < 5;
  async run(model: Model, real: Real): Promise<void> {
    const name = `w${++real.created}`;
    const call = track(
      serviceOf(real).acquire(real.key, {
        mode: this.mode,
        priority: this.priority,
        onBusy: { wait: { timeoutMs: 120_000 } },
      }),
    );
    real.calls.set(name, call);
    const entry = { name, mode: this.mode, priority: this.priority, queued: model.queued++ };
    if (newcomerGranted(model, this.mode, this.priority)) {
      granted(real, name, await call.promise, this.mode);
      model.holders.push(entry);
    } else {
      model.waiters.push(entry);
      await eventually(
        async () => (await waiterRows(db.admin, real.key)).length,
        (n) => n === model.waiters.length || call.settled(),
        `${name} in line`,
      );
    }
    await checkInvariants(model, real, `wait ${this.mode}`);
  }
  toString = () => `wait(${this.mode}, p${this.priority})`;
}

class TryCommand implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly mode: Mode,
    readonly priority: number,
  ) {}
  check = () => true;
  async run(model: Model, real: Real): Promise<void> {
    const name = `t${++real.created}`;
    const lease = await serviceOf(real).tryAcquire(real.key, { mode: this.mode, priority: this.priority });
    if (newcomerGranted(model, this.mode, this.priority)) {
      expect(lease).not.toBeNull();
      granted(real, name, lease!, this.mode);
      model.holders.push({ name, mode: this.mode, priority: this.priority, queued: -1 });
    } else {
      expect(lease).toBeNull();
    }
    await checkInvariants(model, real, `try ${this.mode}`);
  }
  toString = () => `try(${this.mode}, p${this.priority})`;
}

class ReleaseCommand implements fc.AsyncCommand<Model, Real> {
  constructor(readonly index: number) {}
  check = (model: Readonly<Model>) => model.holders.length > 0;
  async run(model: Model, real: Real): Promise<void> {
    const holder = model.holders[this.index % model.holders.length];
    await real.leases.get(holder.name)!.release();
    model.holders = model.holders.filter((h) => h !== holder);
    // The head is granted while it can hold: a reader brings the readers directly behind it.
    for (let head = grantOrder(model)[0]; head && canHold(model, head.mode); head = grantOrder(model)[0]) {
      const call = real.calls.get(head.name)!;
      await eventually(
        () => call.settled(),
        Boolean,
        `grant to ${head.name} (${head.mode}, p${head.priority})`,
        10_000,
      );
      expect(call.error).toBeUndefined();
      granted(real, head.name, call.value!, head.mode);
      model.holders.push(head);
      model.waiters = model.waiters.filter((w) => w !== head);
    }
    await checkInvariants(model, real, 'release');
  }
  toString = () => `release(#${this.index})`;
}

const mode = fc.constantFrom<Mode>('shared', 'shared', 'exclusive');
const priority = fc.integer({ min: 1, max: 2 });
const commands = fc.commands(
  [
    fc.tuple(mode, priority).map(([m, p]) => new WaitCommand(m, p)),
    fc.tuple(mode, priority).map(([m, p]) => new WaitCommand(m, p)),
    fc.tuple(mode, fc.integer({ min: 1, max: 3 })).map(([m, p]) => new TryCommand(m, p)),
    fc.nat(5).map((i) => new ReleaseCommand(i)),
    fc.nat(5).map((i) => new ReleaseCommand(i)),
  ],
  { maxCommands: 14, size: 'max' },
);

let runs = 0;

/** One model run on a fresh key, starting with a reader holding it (so the first waits meet a holder). */
function property(preference: boolean) {
  return fc.asyncProperty(commands, async (cmds) => {
    const real: Real = {
      key: `rw-model:${++runs}`,
      calls: new Map(),
      leases: new Map(),
      created: 0,
      top: 0n,
      lastWriter: 0n,
    };
    const model: Model = { holders: [], waiters: [], queued: 0, preference };
    try {
      const first = (await procs[0].service.tryAcquire(real.key, { mode: 'shared' }))!;
      granted(real, 'first', first, 'shared');
      model.holders.push({ name: 'first', mode: 'shared', priority: 0, queued: -1 });
      await fc.asyncModelRun(() => ({ model, real }), cmds);
    } finally {
      // Every holder lets go, so every waiter is served in turn and nothing outlives the run.
      for (let round = 0; round < 20 && real.calls.size + real.leases.size > 0; round++) {
        for (const lease of real.leases.values()) await lease.release();
        real.leases.clear();
        for (const [name, call] of real.calls) {
          if (!call.settled()) continue;
          if (call.value) real.leases.set(name, call.value);
          real.calls.delete(name);
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
  });
}

beforeAll(async () => {
  Logger.overrideLogger(['error']);
  // One after another: the first creates the tables.
  for (const name of ['a', 'b', 'c']) procs.push(await proc(name, MODEL_OPTIONS, 2));
});

test('read-write: the holders, the line and the tokens follow the reference model under waits, attempts and releases', async () => {
  const started = performance.now();
  await fc.assert(property(true), { numRuns: 30, endOnFailure: true });
  console.log(
    `${runs} runs, commands executed: ${[...executed].map(([step, n]) => `${step} ${n}`).join(', ')}, in ${((performance.now() - started) / 1_000).toFixed(1)} s`,
  );
}, 120_000);

test('negative control: against a model without writer preference, the same runs are caught', async () => {
  // The aimed run first (a writer waits behind the first reader, then a reader of its rank tries: the broken model
  // lets it in), so the control's time does not hang on the random runs reaching that state (at load 8, 40 random
  // runs overran two minutes); the random runs follow if it were not caught.
  const aimed = [new WaitCommand('exclusive', 1), new TryCommand('shared', 1)];
  await expect(fc.assert(property(false), { numRuns: 40, endOnFailure: true, examples: [[aimed]] })).rejects.toThrow(
    /Property failed/,
  );
}, 120_000);
