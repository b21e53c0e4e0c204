/**
 * Issue 38, items 2 and 3, in one process: `@Sticky` keeps mutual exclusion on its owner — a call that overlaps a
 * running one is skipped, refused or waits (per `onBusy`, ranked by `priority`), never run beside
 * it, while a nested call of the same chain still reuses the term's lease — and shutdown drains a sticky call in
 * progress like any decorated call (its lease kept until it ends), while an idle owner hands over at once. Every run
 * records its fencing token and its start and end (database clock) through `lease.fenced()`: the table is the proof.
 */
import { Inject, Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Interval, ScheduleModule } from '@nestjs/schedule';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  LeaseBusyError,
  LeaseLostError,
  LeaseShutdownError,
  type LeaseEvent,
  LeaseModule,
  type LeaseModuleOptions,
  LeaseService,
  LeaseWaitTimeoutError,
  Sticky,
  leaseEntities,
} from 'nest-pg-lease';
import { eventually, FAST, useTestDatabase } from '../support/db.js';
import { sleep } from '../support/sleep.js';
import { track } from '../priority/helpers.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

/** Each call's gate (opened by the test, or before the call) and whether it entered. */
class Calls {
  private readonly gates = new Map<string, { opened: Promise<void>; open: () => void; entered: boolean }>();
  private gate(call: string) {
    let gate = this.gates.get(call);
    if (!gate) {
      let open!: () => void;
      const opened = new Promise<void>((resolve) => (open = resolve));
      this.gates.set(call, (gate = { opened, open, entered: false }));
    }
    return gate;
  }
  open(...calls: string[]): void {
    for (const call of calls) this.gate(call).open();
  }
  entered(call: string): boolean {
    return this.gates.get(call)?.entered ?? false;
  }
  async pass(call: string): Promise<void> {
    const gate = this.gate(call);
    gate.entered = true;
    await gate.opened;
  }
}

/** Ticks of the interval job: a tick takes 3 periods. */
const PERIOD_MS = 100;

@Injectable()
class StickyJobs {
  readonly calls = new Calls();
  intervalOn = false;
  constructor(@Inject(LeaseService) private readonly leases: LeaseService) {}

  /** A run: a fenced row at its start, its gate, a fenced end time; returns its term. */
  private async work(call: string): Promise<bigint> {
    const lease = this.leases.current()!;
    await lease.fenced((manager) =>
      manager.query(
        `INSERT INTO sticky_runs (call, target, owner, fencing_token, started_at) VALUES ($1, $2, $3, $4, clock_timestamp())`,
        [call, lease.targetKey, this.leases.options.owner, String(lease.fencingToken)],
      ),
    );
    await this.calls.pass(call);
    await lease.fenced((manager) =>
      manager.query(`UPDATE sticky_runs SET ended_at = clock_timestamp() WHERE call = $1`, [call]),
    );
    return lease.fencingToken;
  }

  @Sticky('sticky:skip', { onBusy: 'skip' })
  skip(call: string): Promise<bigint | undefined> {
    return this.work(call);
  }

  @Sticky('sticky:throw')
  throwing(call: string): Promise<bigint> {
    return this.work(call);
  }

  @Sticky('sticky:wait', { onBusy: { wait: { timeoutMs: 10_000 } } })
  waiting(call: string): Promise<bigint | undefined> {
    return this.work(call);
  }

  @Sticky('sticky:wait', { priority: 5, onBusy: { wait: { timeoutMs: 10_000 } } })
  urgent(call: string): Promise<bigint | undefined> {
    return this.work(call);
  }

  @Sticky('sticky:wait', { onBusy: { wait: { timeoutMs: 400 } } })
  impatient(call: string): Promise<bigint | undefined> {
    return this.work(call);
  }

  @Sticky('sticky:nested', { onBusy: 'skip' })
  async outer(call: string): Promise<[bigint, bigint | undefined]> {
    const token = this.leases.current()!.fencingToken;
    return [token, await this.inner(`${call}:inner`)];
  }

  @Sticky('sticky:nested', { onBusy: 'skip' })
  inner(call: string): Promise<bigint | undefined> {
    return this.work(call);
  }

  /** A call that starts the next one from a timer set inside it (a job that schedules itself), `afterMs` later. */
  @Sticky('sticky:timer', { onBusy: 'skip' })
  scheduling(call: string, next?: { call: string; afterMs: number; started: (p: Promise<unknown>) => void }) {
    if (next) setTimeout(() => next.started(this.scheduling(next.call)), next.afterMs);
    return this.work(call);
  }

  @Sticky('sticky:drain', { onBusy: 'skip' })
  drained(call: string): Promise<bigint | undefined> {
    return this.work(call);
  }

  @Sticky('sticky:grace', { onBusy: 'skip' })
  graced(call: string): Promise<bigint | undefined> {
    return this.work(call);
  }

  @Sticky('sticky:idle', { onBusy: 'skip' })
  idle(call: string): Promise<bigint | undefined> {
    return this.work(call);
  }

  private ticks = 0;
  /** A tick slower than its period: three periods long. */
  @Interval(PERIOD_MS)
  async interval(): Promise<void> {
    if (!this.intervalOn) return;
    const call = `tick-${this.leases.options.owner}-${++this.ticks}`;
    setTimeout(() => this.calls.open(call), PERIOD_MS * 3);
    await this.ticking(call);
  }

  @Sticky('sticky:interval', { onBusy: 'skip' })
  ticking(call: string): Promise<bigint | undefined> {
    return this.work(call);
  }
}

interface RunRow {
  call: string;
  owner: string;
  fencing_token: string;
  started_at: Date;
  ended_at: Date | null;
}

describe('@Sticky', () => {
  const db = useTestDatabase('sticky_e2e', 'read committed', (admin) =>
    admin.query(
      `CREATE TABLE sticky_runs (call text PRIMARY KEY, target text NOT NULL, owner text NOT NULL,
         fencing_token bigint NOT NULL, started_at timestamptz NOT NULL, ended_at timestamptz)`,
    ),
  );
  const apps = new Set<INestApplicationContext>();

  afterAll(async () => {
    for (const app of apps) await app.close();
  });
  /** Closes `app` (a test's shutdown), once. */
  const close = (app: INestApplicationContext) => {
    apps.delete(app);
    return app.close();
  };

  async function boot(owner: string, options: LeaseModuleOptions = {}) {
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        LeaseModule.forRoot(mergeLeaseOptions(FAST, { tables: { createSchema: true }, owner }, options)),
        ScheduleModule.forRoot(),
      ],
      providers: [StickyJobs],
    })
    class AppModule {}
    const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
    apps.add(app);
    const events: LeaseEvent[] = [];
    app.get(LeaseService).events$.subscribe((event) => events.push(event));
    return { app, jobs: app.get(StickyJobs), events };
  }

  const rowsOf = async (target: string) =>
    (
      await db.admin.query<RunRow>(
        `SELECT call, owner, fencing_token::text, started_at, ended_at FROM sticky_runs WHERE target = $1
         ORDER BY started_at`,
        [target],
      )
    ).rows;
  /** Pairs of runs of `target` whose [start, end] overlap (a run not ended overlaps whatever started after it). */
  const overlapping = async (target: string) =>
    (
      await db.admin.query<{ a: string; b: string }>(
        `SELECT a.call AS a, b.call AS b FROM sticky_runs a JOIN sticky_runs b
           ON a.target = b.target AND a.call < b.call
          AND a.started_at < coalesce(b.ended_at, 'infinity') AND b.started_at < coalesce(a.ended_at, 'infinity')
         WHERE a.target = $1`,
        [target],
      )
    ).rows;
  const busyOf = (events: LeaseEvent[], target: string) =>
    events.filter((event) => event.type === 'busy' && event.targetKey === target).length;

  let one: Awaited<ReturnType<typeof boot>>;
  beforeAll(async () => {
    one = await boot('one');
  });

  test("onBusy 'skip': a call overlapping the running one on the owner is skipped with a 'busy' event", async () => {
    const { jobs, events } = one;
    const first = track(jobs.skip('skip-1'));
    await eventually(() => jobs.calls.entered('skip-1'), Boolean, 'the first call running');
    // The overlapping call's gate is open: run beside the first, it would finish and save.
    jobs.calls.open('skip-2');
    const busy = busyOf(events, 'sticky:skip');
    await expect(jobs.skip('skip-2')).resolves.toBeUndefined();
    expect(busyOf(events, 'sticky:skip')).toBe(busy + 1);
    expect(first.settled()).toBe(false);
    jobs.calls.open('skip-1');
    const term = await first.promise;
    // The owner keeps its term: the next call (not overlapping) runs under the same lease.
    jobs.calls.open('skip-3');
    await expect(jobs.skip('skip-3')).resolves.toBe(term);
    const rows = await rowsOf('sticky:skip');
    expect(rows.map((row) => row.call)).toEqual(['skip-1', 'skip-3']);
    expect(await overlapping('sticky:skip')).toEqual([]);
  });

  test('the default onBusy: an overlapping call is refused with LeaseBusyError, nothing saved', async () => {
    const { jobs } = one;
    const first = track(jobs.throwing('throw-1'));
    await eventually(() => jobs.calls.entered('throw-1'), Boolean, 'the first call running');
    jobs.calls.open('throw-2');
    await expect(jobs.throwing('throw-2')).rejects.toBeInstanceOf(LeaseBusyError);
    jobs.calls.open('throw-1');
    await first.promise;
    expect((await rowsOf('sticky:throw')).map((row) => row.call)).toEqual(['throw-1']);
  });

  test("onBusy 'wait': an overlapping call waits for the running one, then runs (higher priority first)", async () => {
    const { jobs } = one;
    const first = track(jobs.waiting('wait-1'));
    await eventually(() => jobs.calls.entered('wait-1'), Boolean, 'the first call running');
    jobs.calls.open('wait-2', 'wait-3');
    const second = track(jobs.waiting('wait-2'));
    await sleep(50);
    const third = track(jobs.urgent('wait-3'));
    await sleep(400);
    expect(second.settled() || third.settled()).toBe(false);
    expect((await rowsOf('sticky:wait')).map((row) => row.call)).toEqual(['wait-1']);
    jobs.calls.open('wait-1');
    const term = await first.promise;
    await expect(third.promise).resolves.toBe(term);
    await expect(second.promise).resolves.toBe(term);
    // Woken when the first finished (in this process), one after the other, the higher priority first.
    expect((await rowsOf('sticky:wait')).map((row) => row.call)).toEqual(['wait-1', 'wait-3', 'wait-2']);
    expect(await overlapping('sticky:wait')).toEqual([]);
  });

  test('a waiting call gives up at its timeoutMs with LeaseWaitTimeoutError', async () => {
    const { jobs } = one;
    const first = track(jobs.waiting('timeout-1'));
    await eventually(() => jobs.calls.entered('timeout-1'), Boolean, 'the first call running');
    jobs.calls.open('timeout-2');
    const started = performance.now();
    const error: unknown = await jobs.impatient('timeout-2').catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(LeaseWaitTimeoutError);
    expect(performance.now() - started).toBeGreaterThanOrEqual(390);
    jobs.calls.open('timeout-1');
    await first.promise;
    expect((await rowsOf('sticky:wait')).filter((row) => row.call.startsWith('timeout'))).toHaveLength(1);
  });

  // Found with the fault schedule's sticky control: the call chain of an ended sticky call kept lending the term's
  // lease (the term is still held), so a call started by a timer it had set ran beside the call holding the turn.
  test('a call started by a timer that an ended call set is not nested in it: it never runs beside a running call', async () => {
    const { jobs } = one;
    // timer-1 ends at once, leaving a timer that calls timer-late 300 ms later; meanwhile timer-2 takes the turn.
    jobs.calls.open('timer-1', 'timer-late');
    const fired: { late?: Promise<unknown> } = {};
    const started = (p: Promise<unknown>) => void (fired.late = p);
    await jobs.scheduling('timer-1', { call: 'timer-late', afterMs: 300, started });
    const second = track(jobs.scheduling('timer-2'));
    await eventually(() => jobs.calls.entered('timer-2'), Boolean, 'timer-2 running');
    // (The promise is looked for, not awaited: `eventually` resolves with what its probe returns.)
    await eventually(() => fired.late !== undefined, Boolean, 'the timer fired', 5_000);
    const lateCall = track(fired.late!);
    await sleep(300);
    // timer-late's gate is open: run beside timer-2, it has saved its end by now.
    const ranBeside = jobs.calls.entered('timer-late');
    jobs.calls.open('timer-2');
    await second.promise;
    await lateCall.promise.catch(() => undefined);
    expect(ranBeside).toBe(false);
    expect(await overlapping('sticky:timer')).toEqual([]);
  });

  test("on an instance that is not the owner the call never runs: skipped with 'wait', refused with 'throw'", async () => {
    const { jobs } = one;
    // `one` owns both keys (its first call makes it the candidate, elected at once: nobody else is in line).
    jobs.calls.open('own-wait', 'own-throw');
    await expect(jobs.waiting('own-wait')).resolves.toEqual(expect.any(BigInt));
    await expect(jobs.throwing('own-throw')).resolves.toEqual(expect.any(BigInt));
    const two = await boot('two');
    try {
      two.jobs.calls.open('two-wait', 'two-throw');
      const busy = busyOf(two.events, 'sticky:wait');
      const started = performance.now();
      // Waiting for the owner to die would be waiting a lease timeout, or for ever: skipped at once.
      await expect(two.jobs.waiting('two-wait')).resolves.toBeUndefined();
      expect(performance.now() - started).toBeLessThan(5_000);
      // (Its candidate's first attempt is refused too: a `busy` event of its own.)
      expect(busyOf(two.events, 'sticky:wait')).toBeGreaterThan(busy);
      await expect(two.jobs.throwing('two-throw')).rejects.toBeInstanceOf(LeaseBusyError);
      const calls = [...(await rowsOf('sticky:wait')), ...(await rowsOf('sticky:throw'))].map((row) => row.call);
      expect(calls).not.toContain('two-wait');
      expect(calls).not.toContain('two-throw');
    } finally {
      await close(two.app);
    }
  });

  test('a nested call of the same chain reuses the term lease (reentrant)', async () => {
    const { jobs } = one;
    jobs.calls.open('nested-1:inner');
    const [outer, inner] = await jobs.outer('nested-1');
    expect(inner).toBe(outer);
    expect((await rowsOf('sticky:nested')).map((row) => row.call)).toEqual(['nested-1:inner']);
  });

  test('an @Interval tick slower than its period never runs beside the previous one', async () => {
    const { jobs, events } = one;
    jobs.intervalOn = true;
    try {
      await eventually(
        () => rowsOf('sticky:interval'),
        (rows) => rows.filter((row) => row.ended_at !== null).length >= 3,
        'three ticks run',
        15_000,
        50,
      );
    } finally {
      jobs.intervalOn = false;
    }
    await eventually(
      () => rowsOf('sticky:interval'),
      (rows) => rows.every((row) => row.ended_at !== null),
      'the last tick ended',
    );
    expect(await overlapping('sticky:interval')).toEqual([]);
    expect(busyOf(events, 'sticky:interval')).toBeGreaterThan(0);
  });

  describe('shutdown', () => {
    test('a sticky call in progress drains: its lease is kept until it ends, then handed over', async () => {
      const a = await boot('drain-a', { timing: { shutdownGraceMs: 10_000, waitPollIntervalMs: 60_000 } });
      const b = await boot('drain-b', { timing: { waitPollIntervalMs: 60_000 } });
      const running = track(a.jobs.drained('a-1'));
      await eventually(() => a.jobs.calls.entered('a-1'), Boolean, 'a owning the key and running');
      // b is a candidate now, in line behind a's term.
      await expect(b.jobs.drained('b-0')).resolves.toBeUndefined();
      const closing = track(close(a.app));
      // b's ticks during a's drain: each would run (and save) if b were granted the key.
      let n = 0;
      const ticks: Array<ReturnType<typeof track<bigint | undefined>>> = [];
      const ticking = setInterval(() => {
        const call = `b-${++n}`;
        b.jobs.calls.open(call);
        ticks.push(track(b.jobs.drained(call)));
      }, 50);
      try {
        await sleep(1_000);
        const closedEarly = closing.settled();
        a.jobs.calls.open('a-1');
        await eventually(() => running.settled(), Boolean, "a's tick ended");
        await eventually(() => closing.settled(), Boolean, 'a closed', 10_000);
        await eventually(
          () => ticks.filter((tick) => tick.value !== undefined).length,
          (ran) => ran > 0,
          'b ran',
        );
        const rows = await rowsOf('sticky:drain');
        const own = rows.find((row) => row.call === 'a-1')!;
        // No run of b while a's tick ran: each of b's fenced saves came after a's end save (committed).
        const beside = rows.filter(
          (row) => row.owner === 'drain-b' && (own.ended_at === null || row.started_at < own.ended_at),
        );
        expect(beside.map((row) => row.call)).toEqual([]);
        expect(running.error).toBeUndefined();
        expect(own.ended_at).not.toBeNull();
        expect(closedEarly).toBe(false);
        expect(closing.error).toBeUndefined();
        const next = rows.filter((row) => row.owner === 'drain-b');
        expect(next.length).toBeGreaterThan(0);
        for (const row of next) expect(BigInt(row.fencing_token)).toBeGreaterThan(running.value!);
        expect(await overlapping('sticky:drain')).toEqual([]);
      } finally {
        clearInterval(ticking);
        a.jobs.calls.open('a-1');
      }
    });

    test('a sticky call longer than shutdownGraceMs is aborted at the grace and its lease released', async () => {
      const graceMs = 600;
      const a = await boot('grace-a', { timing: { shutdownGraceMs: graceMs } });
      const running = track(a.jobs.graced('g-1'));
      await eventually(() => a.jobs.calls.entered('g-1'), Boolean, 'a owning the key and running');
      const lease = a.app
        .get(LeaseService)
        .heldLeases()
        .find((held) => held.targetKey === 'sticky:grace')!;
      const started = performance.now();
      const closing = track(close(a.app));
      await eventually(() => closing.settled(), Boolean, 'a closed', graceMs + 5_000);
      const closedMs = performance.now() - started;
      expect(closedMs).toBeGreaterThanOrEqual(graceMs - 10);
      expect(closedMs).toBeLessThan(graceMs + 3_000);
      expect(lease.signal.reason).toBeInstanceOf(LeaseShutdownError);
      const { rows } = await db.admin.query(
        `SELECT 1 FROM job_lease WHERE target_id = 'sticky:grace' AND lease_token IS NOT NULL`,
      );
      expect(rows).toEqual([]);
      // Its end save comes after the grace: refused.
      a.jobs.calls.open('g-1');
      await eventually(() => running.settled(), Boolean, 'the call ended');
      expect(running.error).toBeInstanceOf(LeaseLostError);
      expect((await rowsOf('sticky:grace')).map((row) => row.ended_at)).toEqual([null]);
    });

    test('an idle owner hands over at once', async () => {
      const a = await boot('idle-a', { timing: { shutdownGraceMs: 10_000, waitPollIntervalMs: 60_000 } });
      const b = await boot('idle-b', { timing: { waitPollIntervalMs: 60_000 } });
      a.jobs.calls.open('idle-a-1', 'idle-b-0');
      const term = await a.jobs.idle('idle-a-1');
      expect(term).toEqual(expect.any(BigInt));
      await expect(b.jobs.idle('idle-b-0')).resolves.toBeUndefined();
      const started = Date.now();
      const closing = close(a.app);
      await closing;
      const closedMs = Date.now() - started;
      const elected = await eventually(
        () => b.events.find((event) => event.type === 'elected' && event.targetKey === 'sticky:idle'),
        Boolean,
        'b elected',
      );
      // Woken by the release's NOTIFY (the poll is 60 s), well within the 10 s grace.
      expect(elected!.at.getTime() - started).toBeLessThan(3_000);
      expect(closedMs).toBeLessThan(3_000);
    });
  });
});
