/**
 * Model-based test of several keys at once (`run([k1, k2, …])`, docs/multi-key.md) against the real database, in the
 * style of the priority line's models (model.e2e-spec.ts, semaphore-model.lifecycle-spec.ts). Four "processes" (a
 * LeaseService each) start multi-key calls over four keys — random subsets in random order, `'throw'` or `'wait'` —
 * and finish them, in random sequences. The reference model is ordered acquisition: each call takes its keys in the
 * global order, a key free with nobody in its line is taken, else the call queues in that key's line (first come
 * first served) holding the keys before it; `'throw'` runs only when every key is free with nobody in line. After
 * every step the real system must settle to the model's state (each key's holder and line, as `list()` reports them,
 * and which calls run their work) within a liveness bound, and no two works ever overlap on a key (checked as they
 * enter). Every call finishes: the model never deadlocks, so neither may the library.
 *
 * Negative control: the same property with the keys taken in the order given (`useMultiKeyOrder('as-given')`, a
 * test-only defect): a call then holds keys above the one it waits for (the precondition of a cycle of waits: two
 * calls over overlapping keys in opposite orders wait for each other), the state never settles to the model's, and
 * the property fails.
 */
import { Logger } from '@nestjs/common';
import fc from 'fast-check';
import { LeaseBusyError, type LeaseService } from 'nest-pg-lease';
import { useMultiKeyOrder } from '../../libs/lease/src/internal.js';
import { eventually, useTestDatabase } from '../support/db.js';
import { modelParticipant } from './helpers.js';

const db = useTestDatabase('multi_model');
const KEYS = ['mk:a', 'mk:b', 'mk:c', 'mk:d'];
const PROCS = 4;

type Policy = 'throw' | 'wait';

/** A process's call as the model sees it. */
interface ModelCall {
  keys: string[];
  /** How many of `keys` (sorted) it holds. */
  taken: number;
  running: boolean;
}

interface Model {
  holder: Map<string, number | undefined>;
  line: Map<string, number[]>;
  calls: Map<number, ModelCall>;
}

interface RealCall {
  promise: Promise<unknown>;
  outcome?: unknown;
  running: boolean;
  finish: () => void;
}

interface Real {
  services: LeaseService[];
  owners: string[];
  calls: Map<number, RealCall>;
  /** Which process's work is inside each key now. */
  inside: Map<string, number>;
  overlaps: string[];
  settleMs: number;
  /** The run's own keys: `prefix` + a model key (the same order). */
  prefix: string;
}

/** Ordered acquisition, as the model: take what is free with nobody in line, else queue at the first busy key. */
function advance(model: Model, proc: number): void {
  const call = model.calls.get(proc)!;
  while (call.taken < call.keys.length) {
    const key = call.keys[call.taken];
    if (model.holder.get(key) === undefined && model.line.get(key)!.length === 0) {
      model.holder.set(key, proc);
      call.taken += 1;
    } else {
      model.line.get(key)!.push(proc);
      return;
    }
  }
  call.running = true;
}

/** What the model says the real system shows: each key's holder and line (owners), the running calls. */
function expected(model: Model, real: Real): string {
  const keys = KEYS.map((key) => {
    const holder = model.holder.get(key);
    const line = model.line.get(key)!.map((proc) => real.owners[proc]);
    return `${key}=${holder === undefined ? '-' : real.owners[holder]}[${line.join(',')}]`;
  });
  const running = [...model.calls].filter(([, call]) => call.running).map(([proc]) => proc);
  return `${keys.join(' ')} running:${running.sort().join(',')}`;
}

async function observed(real: Real): Promise<string> {
  const keys = await Promise.all(
    KEYS.map(async (key) => {
      const rows = await real.services[0].list(real.prefix + key);
      const holder = rows.find((row) => row.state === 'held')?.owner ?? '-';
      const line = rows.filter((row) => row.state === 'waiting' && row.live).map((row) => row.owner);
      return `${key}=${holder}[${line.join(',')}]`;
    }),
  );
  const running = [...real.calls].filter(([, call]) => call.running).map(([proc]) => proc);
  return `${keys.join(' ')} running:${running.sort().join(',')}`;
}

/** Every order of `items` (a finish frees at most 3 keys: at most 6 orders). */
function orders<T>(items: readonly T[]): T[][] {
  if (items.length <= 1) return [[...items]];
  return items.flatMap((item, i) =>
    orders([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [item, ...rest]),
  );
}

function copyOf(model: Model): Model {
  return {
    holder: new Map(model.holder),
    line: new Map([...model.line].map(([key, procs]) => [key, [...procs]])),
    calls: new Map([...model.calls].map(([proc, call]) => [proc, { ...call, keys: [...call.keys] }])),
  };
}

/** Waits until the real system shows the state of one of `models`, and returns that one. */
async function settledInOne(models: Model[], real: Real, step: string): Promise<Model> {
  const wanted = models.map((model) => expected(model, real));
  const got = await eventually(
    () => observed(real),
    (state) => wanted.includes(state),
    `${step}: the state of the model, ${[...new Set(wanted)].join(' or ')}`,
    real.settleMs,
  );
  expect(real.overlaps).toEqual([]);
  return models[wanted.indexOf(got)];
}

async function settled(model: Model, real: Real, step: string): Promise<void> {
  const want = expected(model, real);
  await eventually(
    () => observed(real),
    (got) => got === want,
    `${step}: the state of the model, ${want}`,
    real.settleMs,
  );
  expect(real.overlaps).toEqual([]);
}

class StartCommand implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly proc: number,
    readonly keys: string[],
    readonly policy: Policy,
  ) {}
  check = (model: Readonly<Model>) => !model.calls.has(this.proc);
  async run(model: Model, real: Real): Promise<void> {
    const { proc, keys, policy } = this;
    let finish!: () => void;
    const gate = new Promise<void>((resolve) => (finish = resolve));
    const call: RealCall = { running: false, finish, promise: Promise.resolve() };
    call.promise = real.services[proc]
      .run(
        keys.map((key) => real.prefix + key),
        async () => {
          for (const key of keys) {
            const other = real.inside.get(key);
            if (other !== undefined) real.overlaps.push(`${key}: p${proc} entered while p${other} is inside`);
            real.inside.set(key, proc);
          }
          call.running = true;
          await gate;
          for (const key of keys) if (real.inside.get(key) === proc) real.inside.delete(key);
          call.running = false;
        },
        { onBusy: policy === 'wait' ? { wait: { timeoutMs: 120_000 } } : 'throw' },
      )
      .then(
        () => (call.outcome = 'done'),
        (error: unknown) => (call.outcome = error),
      );
    const sorted = [...keys].sort();
    const free = sorted.every((key) => model.holder.get(key) === undefined && model.line.get(key)!.length === 0);
    if (policy === 'throw' && !free) {
      await call.promise;
      expect(call.outcome).toBeInstanceOf(LeaseBusyError);
    } else {
      real.calls.set(proc, call);
      model.calls.set(proc, { keys: sorted, taken: 0, running: false });
      advance(model, proc);
    }
    await settled(model, real, this.toString());
  }
  toString = () => `start(p${this.proc}, [${this.keys.join(',')}], ${this.policy})`;
}

class FinishCommand implements fc.AsyncCommand<Model, Real> {
  constructor(readonly index: number) {}
  check = (model: Readonly<Model>) => [...model.calls.values()].some((call) => call.running);
  async run(model: Model, real: Real): Promise<void> {
    const running = [...model.calls].filter(([, call]) => call.running).map(([proc]) => proc);
    const proc = running[this.index % running.length];
    const call = real.calls.get(proc)!;
    call.finish();
    await call.promise;
    expect(call.outcome).toBe('done');
    real.calls.delete(proc);
    const { keys } = model.calls.get(proc)!;
    model.calls.delete(proc);
    // Each freed key goes to the head of its line, which goes on to its next keys.
    const grantees: number[] = [];
    for (const key of keys) {
      model.holder.set(key, undefined);
      const next = model.line.get(key)!.shift();
      if (next !== undefined) {
        model.holder.set(key, next);
        model.calls.get(next)!.taken += 1;
        grantees.push(next);
      }
    }
    // The grantees go on at once, each in its own process: two that reach the same free key race for it, and either
    // may win (neither was in its line). Every order is a state the real system may settle in; it must reach one.
    const outcomes = orders(grantees).map((order) => {
      const next = copyOf(model);
      for (const grantee of order) advance(next, grantee);
      return next;
    });
    const reached = await settledInOne(outcomes, real, this.toString());
    model.holder = reached.holder;
    model.line = reached.line;
    model.calls = reached.calls;
  }
  toString = () => `finish(#${this.index})`;
}

const commands = fc.commands(
  [
    fc
      .tuple(
        fc.nat(PROCS - 1),
        fc.shuffledSubarray(KEYS, { minLength: 1, maxLength: 3 }),
        fc.constantFrom<Policy>('wait', 'wait', 'throw'),
      )
      .map(([proc, keys, policy]) => new StartCommand(proc, keys, policy)),
    fc.nat(3).map((index) => new FinishCommand(index)),
  ],
  { maxCommands: 14, size: 'max' },
);

let run = 0;

/** The property: every run of commands, then every call finished, on processes of their own. */
async function property(settleMs: number, numRuns: number, seed?: number): Promise<void> {
  await fc.assert(
    fc.asyncProperty(commands, async (cmds) => {
      const suffix = `${++run}`;
      const prefix = `run${suffix}:`;
      const real: Real = {
        services: [],
        owners: [],
        calls: new Map(),
        inside: new Map(),
        overlaps: [],
        settleMs,
        prefix,
      };
      const opened = [];
      // One at a time: the first creates the tables.
      for (let proc = 0; proc < PROCS; proc++) {
        opened.push(modelParticipant(await db.open({ owner: `p${proc}-${suffix}` })));
      }
      real.services = opened.map((one) => one.service);
      real.owners = real.services.map((service) => service.options.owner);
      const model: Model = {
        holder: new Map(KEYS.map((key) => [key, undefined])),
        line: new Map(KEYS.map((key) => [key, []])),
        calls: new Map(),
      };
      try {
        await fc.asyncModelRun(() => ({ model, real }), cmds);
        // Every call finishes: finish the running ones until none is left (the waiting ones run in turn).
        for (let round = 0; model.calls.size > 0 && round < 20; round++) await new FinishCommand(0).run(model, real);
        expect(model.calls.size).toBe(0);
      } finally {
        for (const call of real.calls.values()) call.finish();
        await Promise.all(opened.map((one) => one.close()));
      }
    }),
    { numRuns, endOnFailure: true, ...(seed === undefined ? {} : { seed }) },
  );
}

beforeAll(() => Logger.overrideLogger(['error']));
afterEach(() => useMultiKeyOrder('sorted'));

test('ordered acquisition: no two works overlap on a key, every call finishes, as the reference model says', async () => {
  const started = performance.now();
  await property(15_000, 12);
  console.log(`${run} runs in ${((performance.now() - started) / 1_000).toFixed(1)} s`);
}, 120_000);

test('negative control: keys taken in the order given are held out of the global order, and the property fails', async () => {
  useMultiKeyOrder('as-given');
  // A liveness bound that a deadlock outlasts: the calls wait 120 s for each other.
  const failure = await property(2_000, 30).then(
    () => undefined,
    (error: unknown) => error as Error & { cause?: unknown },
  );
  expect(failure).toBeDefined();
  // The property's own check caught it (not a crash of the harness): the state never settled to the model's.
  expect(String(failure!.cause)).toMatch(/the state of the model/);
  console.log(
    `negative control caught: ${failure!.message.split('\n').slice(0, 3).join(' ')}\n${String(failure!.cause)}`,
  );
}, 120_000);
