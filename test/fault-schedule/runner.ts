/**
 * One run of the fault schedule: a fresh database on the given server, one TCP proxy per worker slot, the workload
 * processes, then the seed's steps one after another (each aimed, injected, healed), a probe of the history after
 * every step, the settling (every fault healed, every worker closed while its calls run), and the checker.
 */
import { join } from 'node:path';
import { createDatabase, dropDatabase, type PostgresServer } from '@app/pg-harness';
import type pg from 'pg';
import {
  connect,
  LEASE,
  prepareTables,
  sleep,
  Worker,
  type Received,
  type WorkerScript,
} from '../faults/support/harness.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { probeLengths } from './checker-length.js';
import { multiOverlaps, stickyOverlaps } from './checker-modes.js';
import { readWriteOverlaps, RW_PREFIX } from './checker-read-write.js';
import { closeAndCheck } from './close-check.js';
import { checkRun, type Figures, type Violation } from './checker.js';
import { armRacepoint, disarmRacepoints, installInstrumentation, probe, sleepingBackends } from './instrumentation.js';
import type { ScheduleMessage, ScheduleParentMessage, ScheduleWorkerConfig } from './protocol.js';
import { Drains, ownerOf, postmasterOf } from './runner-modes.js';
import {
  deriveSeed,
  describeStep,
  FAULT_KINDS,
  JOIN_KEYS,
  STICKY_KEY,
  stepOf,
  type FaultKind,
  type Step,
} from './schedule.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

const WORKER_SCRIPT = join(process.cwd(), 'test', 'fault-schedule', 'worker.ts');

export const CONTROLS = [
  'fence-off',
  'token-before-lock',
  'sticky-overlap',
  'multi-skip-last',
  'rw-reader-beside-writer',
  'renew-one-length',
] as const;
export type Control = (typeof CONTROLS)[number];

export const WORKERS = 4;
const LOOPS = 3;
const HOT_KEYS = Array.from({ length: 6 }, (_, i) => `h${i}`);
const BULK_KEYS = Array.from({ length: 48 }, (_, i) => `b${i}`);
/** Read-write keys: only read-write calls take them (worker-read-write.ts). */
const RW_KEYS = Array.from({ length: 2 }, (_, i) => `${RW_PREFIX}${i}`);
/** How long a step waits for its worker to reach the phase it aims at before the fault lands unaimed. */
const AIM_TIMEOUT_MS = 8_000;

export interface RunSpec {
  seed: number;
  /** Run steps until this much time has passed (the last step may overrun it a little). */
  minutes?: number;
  /** Run exactly this many steps (a replay), whatever the time. */
  steps?: number;
  /** The SCHEDULE_VERSION whose steps to draw (a kept seed's); default the current one. */
  schedule?: number;
  control?: Control;
  /** Go on after the probe finds a violation (default: settle and check at once). */
  keepGoing?: boolean;
  /** A control's second run in CI (run.ts, CONTROL_RETRY_SEED): judged on its own, never retried. */
  retry?: boolean;
}

export interface StepRecord {
  step: Step;
  /** `hit`: the worker reached the phase and the fault landed there; `missed`: it landed unaimed after the timeout. */
  aim: 'hit' | 'missed' | 'none';
  /** What the fault did: backends ended, statements stalled, skipped (a restart without an embedded server). */
  effect: string;
  endedAtMs: number;
}

export interface RunResult {
  spec: RunSpec;
  records: StepRecord[];
  wallMs: number;
  /** Wall time of the steps alone (from the workers ready to the last step). */
  stepsMs: number;
  faults: Record<FaultKind, number>;
  figures: Figures;
  violations: Violation[];
  /** The probe's first finding (violations are also in `violations` after the full check). */
  firstViolation?: { step: number; atMs: number; what: string[] };
  harnessErrors: string[];
}

const wall = () => performance.timeOrigin + performance.now();
const s = (ms: number) => (ms / 1000).toFixed(1);

/** A worker slot: one proxy, a succession of incarnations (`w<slot>.<n>`, also their owner and application_name). */
class Slot {
  incarnation = 0;
  worker?: Worker<ScheduleMessage, ScheduleParentMessage>;
  ready: Promise<void> = Promise.resolve();

  constructor(
    readonly index: number,
    readonly proxy: TcpProxy,
    readonly url: string,
  ) {}

  get name(): string {
    return `w${this.index}.${this.incarnation}`;
  }
}

export class ScheduleRun {
  private admin!: pg.Client;
  private url = '';
  private readonly slots: Slot[] = [];
  private readonly log: Received<ScheduleMessage>[] = [];
  /** Wall-clock intervals each incarnation was SIGSTOPped: a wait's bound is extended by its own process's pauses. */
  private readonly pauses = new Map<string, Array<[number, number]>>();
  private readonly violations: Violation[] = [];
  private readonly harnessErrors: string[] = [];
  private readonly faults = Object.fromEntries(FAULT_KINDS.map((kind) => [kind, 0])) as Record<FaultKind, number>;
  /** When a row may last have been left to expire by itself (a kill, a close that logged a failed release). */
  private lastOrphanAt = 0;
  /** When each incarnation was ready (system clock): a drain reaches a process no sooner than it runs. */
  private readonly readyAt = new Map<string, number>();
  private drains?: Drains;

  private readonly script: WorkerScript;

  /** `artifacts`: the run's folder, where each worker's output goes (`<worker>.log`). */
  constructor(
    private readonly spec: RunSpec,
    private readonly server: PostgresServer,
    artifacts: string,
    private readonly say: (line: string) => void = console.log,
  ) {
    this.script = { path: WORKER_SCRIPT, artifacts };
  }

  async run(): Promise<RunResult> {
    const startedAt = wall();
    this.url = await createDatabase(this.server.url, 'schedule');
    await prepareTables(this.url, [...HOT_KEYS, ...BULK_KEYS, STICKY_KEY]);
    this.admin = await connect(this.url);
    await installInstrumentation(this.admin);
    // The operator's tables before any worker starts: every worker's drains are on.
    this.drains = await Drains.open(this.url);
    for (let index = 0; index < WORKERS; index++) {
      const { proxy, url } = await TcpProxy.inFrontOf(this.url);
      this.slots.push(new Slot(index, proxy, url));
    }
    const records: StepRecord[] = [];
    const phases: string[] = [];
    let firstViolation: RunResult['firstViolation'];
    let stepsMs = 0;
    try {
      await Promise.all(this.slots.map((slot) => this.startIncarnation(slot)));
      const stepsFrom = wall();
      phases.push(`setup ${s(stepsFrom - startedAt)} s`);
      const deadline = this.spec.steps === undefined ? stepsFrom + (this.spec.minutes ?? 1) * 60_000 : Infinity;
      for (let index = 0; this.spec.steps === undefined ? wall() < deadline : index < this.spec.steps; index++) {
        const shape = { workers: WORKERS, leaseTimeoutMs: LEASE.timing!.leaseTimeoutMs! };
        const step = stepOf(this.spec.seed, index, shape, this.spec.schedule);
        await sleep(step.gapMs);
        await Promise.all(this.slots.map((slot) => slot.ready));
        const record = await this.execute(step);
        record.endedAtMs = wall() - stepsFrom;
        records.push(record);
        this.faults[step.kind]++;
        this.say(`  ${describeStep(step)} → ${record.aim === 'none' ? '' : `${record.aim}; `}${record.effect}`);
        const found = [
          ...(await probe(this.admin)),
          ...stickyOverlaps(this.log).map((o) => `sticky: ${o}`),
          ...multiOverlaps(this.log).map((o) => `multi-key: ${o}`),
          ...readWriteOverlaps(this.log).map((o) => `read-write: ${o}`),
          ...(await probeLengths(this.admin, this.log, LEASE.timing!.leaseTimeoutMs!)),
        ];
        if (found.length && !firstViolation) {
          firstViolation = { step: index, atMs: wall() - stepsFrom, what: found };
          this.say(`  ! probe after step #${index} (${((wall() - stepsFrom) / 1000).toFixed(1)} s): ${found[0]}`);
          if (!this.spec.keepGoing) break;
        }
      }
      stepsMs = wall() - stepsFrom;
      phases.push(`steps ${s(stepsMs)} s`);
      const settling = wall();
      await this.settle();
      phases.push(`settling ${s(wall() - settling)} s`);
    } catch (error) {
      this.harnessErrors.push(`harness: ${(error as Error)?.stack ?? String(error)}`);
    } finally {
      for (const slot of this.slots) {
        slot.worker?.signal('SIGCONT');
        await slot.worker?.end(5_000);
        await slot.proxy.stop();
      }
      await this.drains?.close();
    }
    let figures: Figures;
    const checking = wall();
    try {
      const context = { drains: this.drains?.windows ?? [], readyAt: this.readyAt };
      const checked = await checkRun(this.admin, this.log, this.pauses, context);
      figures = checked.figures;
      this.violations.push(...checked.violations);
      phases.push(`check ${s(wall() - checking)} s`);
      this.say(`  ${phases.join(', ')}`);
    } finally {
      await this.admin.end().catch(() => undefined);
      await dropDatabase(this.server.url, this.url).catch(() => undefined);
    }
    return {
      spec: this.spec,
      records,
      wallMs: wall() - startedAt,
      stepsMs,
      faults: this.faults,
      figures,
      violations: this.violations,
      firstViolation,
      harnessErrors: this.harnessErrors,
    };
  }

  // --- workers ----------------------------------------------------------------------------------------------------

  private startIncarnation(slot: Slot, afterMs = 0): Promise<void> {
    slot.ready = (async () => {
      await sleep(afterMs);
      slot.incarnation++;
      const config: ScheduleWorkerConfig = {
        name: slot.name,
        url: slot.url,
        seed: deriveSeed(this.spec.seed, slot.index, slot.incarnation),
        lease: mergeLeaseOptions(
          LEASE,
          this.spec.control === 'token-before-lock' ? { connections: { maxBatchSize: 1 } } : {},
        ),
        poolSize: 12,
        loops: LOOPS,
        hotKeys: HOT_KEYS,
        bulkKeys: BULK_KEYS,
        joinKeys: [...JOIN_KEYS],
        unfenced: this.spec.control === 'fence-off',
        tokenBeforeLock: this.spec.control === 'token-before-lock',
        stickyOverlap: this.spec.control === 'sticky-overlap',
        multiSkipLast: this.spec.control === 'multi-skip-last',
        rwKeys: RW_KEYS,
        readerBesideWriter: this.spec.control === 'rw-reader-beside-writer',
        renewOneLength: this.spec.control === 'renew-one-length',
        maxLifetimeMs: 60 * 60_000,
      };
      // A start can fail while the server restarts: try again (the same incarnation name, a fresh process).
      for (let attempt = 1; ; attempt++) {
        try {
          slot.worker = await Worker.startScript<ScheduleMessage, ScheduleParentMessage>(
            this.script,
            config,
            this.log,
            60_000,
          );
          this.readyAt.set(slot.name, Date.now());
          return;
        } catch (error) {
          if (attempt === 3) throw error;
          await sleep(1_000);
        }
      }
    })();
    return slot.ready;
  }

  /** Arms `phase` in the slot's worker and waits for a call to reach it; that call then waits for `go`. */
  private async aim(slot: Slot, step: Step): Promise<StepRecord['aim']> {
    if (step.phase === 'any') return 'none';
    const worker = slot.worker!;
    const since = performance.now();
    worker.post({ t: 'arm', step: step.index, phase: step.phase });
    try {
      await worker.waitFor((m) => m.t === 'hit' && m.step === step.index, `phase ${step.phase}`, AIM_TIMEOUT_MS, since);
      return 'hit';
    } catch {
      worker.post({ t: 'disarm', step: step.index });
      return 'missed';
    }
  }

  private go(slot: Slot, step: Step): void {
    slot.worker?.post({ t: 'go', step: step.index });
  }

  // --- steps ------------------------------------------------------------------------------------------------------

  private async execute(step: Step): Promise<StepRecord> {
    // A sticky step aims at the sticky job's owner (only it runs sticky calls), else at its own slot.
    const owner = step.phase === 'sticky' ? await ownerOf(this.admin, STICKY_KEY) : undefined;
    const slot = this.slots.find((s) => owner !== undefined && s.worker?.name === owner) ?? this.slots[step.worker];
    const worker = slot.worker!;
    const record: StepRecord = { step, aim: 'none', effect: '', endedAtMs: 0 };
    switch (step.kind) {
      case 'sigkill': {
        record.aim = await this.aim(slot, step);
        worker.signal('SIGKILL');
        await worker.exited;
        this.lastOrphanAt = wall();
        record.effect = `${worker.name} killed`;
        void this.startIncarnation(slot, step.restartAfterMs);
        break;
      }
      case 'sigstop': {
        record.aim = await this.aim(slot, step);
        const from = wall();
        worker.signal('SIGSTOP');
        await sleep(step.durationMs);
        worker.signal('SIGCONT');
        this.pauseOf(worker.name).push([from, wall()]);
        this.go(slot, step);
        record.effect = `${worker.name} stopped ${Math.round(wall() - from)} ms`;
        break;
      }
      case 'backend-kill': {
        record.aim = await this.aim(slot, step);
        const n = await this.terminate(worker.name, step);
        this.go(slot, step);
        record.effect = `${n} backend(s) of ${worker.name} ended`;
        break;
      }
      case 'proxy-delay':
      case 'proxy-drop':
      case 'proxy-blackhole': {
        record.aim = await this.aim(slot, step);
        if (step.kind === 'proxy-delay') slot.proxy.set('delay', step.delayMs);
        else if (step.kind === 'proxy-drop') slot.proxy.set('drop');
        else slot.proxy.freeze();
        this.go(slot, step);
        await sleep(step.durationMs);
        slot.proxy.thaw();
        record.effect = `${worker.name}'s network healed after ${step.durationMs} ms`;
        break;
      }
      case 'pg-restart': {
        if (!this.server.embedded) {
          record.effect = 'skipped (DATABASE_URL: an external server is not restarted)';
          break;
        }
        record.aim = await this.aim(slot, step);
        const from = wall();
        await this.admin.end().catch(() => undefined);
        await this.server.stop();
        this.go(slot, step);
        await sleep(step.durationMs);
        await this.server.start();
        this.admin = await connect(this.url);
        record.effect = `server down ${Math.round(wall() - from)} ms`;
        break;
      }
      case 'racepoint': {
        // Aimed like a phase: armed until a first statement of the owner stalls there (at most AIM_TIMEOUT_MS), and
        // from then on for the step's duration.
        await armRacepoint(this.admin, step.point!, worker.name, step.sleepMs!, AIM_TIMEOUT_MS + step.durationMs);
        let most = 0;
        for (const until = wall() + AIM_TIMEOUT_MS; wall() < until && !most; await sleep(25)) {
          most = await sleepingBackends(this.admin, worker.name);
        }
        record.aim = most ? 'hit' : 'missed';
        for (const until = wall() + (most ? step.durationMs : 0); wall() < until; await sleep(50)) {
          most = Math.max(most, await sleepingBackends(this.admin, worker.name));
        }
        await disarmRacepoints(this.admin);
        // Let the stalled statements land before the next step (they sleep at most sleepMs more).
        for (const until = wall() + step.sleepMs! + 3_000; wall() < until; await sleep(50)) {
          if ((await sleepingBackends(this.admin, worker.name)) === 0) break;
        }
        record.effect = most ? `up to ${most} statement(s) of ${worker.name} stalled` : 'no statement reached it';
        break;
      }
      case 'close-restart': {
        record.aim = await this.aim(slot, step);
        const problems = await this.closeAndCheck(slot, step);
        record.effect = problems.length ? `close: ${problems.join('; ')}` : `${worker.name} closed cleanly`;
        void this.startIncarnation(slot, step.restartAfterMs);
        break;
      }
      case 'drain': {
        await this.drains!.drain(step.key!, step.durationMs, step.index);
        record.effect = `${step.key} drained ${step.durationMs} ms, undrained`;
        break;
      }
      case 'handoff-crash':
        record.effect = await this.handoffCrash(slot, step, record);
        break;
    }
    return record;
  }

  /**
   * A crash between a grant and its confirmation: the confirm-grant racepoint stalls the worker's confirmation of a
   * grant a release handed to it (at most AIM_TIMEOUT_MS for one to come; else the crash lands unaimed), then the
   * server stops at once (SIGQUIT to the postmaster: no checkpoint) and starts again, or the waiter is SIGKILLed
   * (its stalled confirmation commits after its sleep, for a dead holder).
   */
  private async handoffCrash(slot: Slot, step: Step, record: StepRecord): Promise<string> {
    const worker = slot.worker!;
    if (step.crash === 'server' && !this.server.embedded)
      return 'skipped (DATABASE_URL: an external server is not crashed)';
    const postmaster = step.crash === 'server' ? await postmasterOf(this.admin) : 0;
    await armRacepoint(this.admin, 'confirm-grant', worker.name, step.sleepMs!, AIM_TIMEOUT_MS + step.sleepMs!);
    let hit = false;
    for (const until = wall() + AIM_TIMEOUT_MS; wall() < until && !hit; await sleep(20)) {
      hit = (await sleepingBackends(this.admin, worker.name)) > 0;
    }
    record.aim = hit ? 'hit' : 'missed';
    await disarmRacepoints(this.admin);
    if (step.crash === 'server') {
      const from = wall();
      process.kill(postmaster, 'SIGQUIT');
      await this.admin.end().catch(() => undefined);
      await this.server.stop();
      await sleep(step.durationMs);
      await this.server.start();
      this.admin = await connect(this.url);
      return `server stopped at once (SIGQUIT), down ${Math.round(wall() - from)} ms`;
    }
    worker.signal('SIGKILL');
    await worker.exited;
    void this.startIncarnation(slot, step.restartAfterMs);
    // The stalled confirmation lands after its sleep, for a dead waiter (its row then lives a lease timeout): let it,
    // before the next step.
    for (const until = wall() + step.sleepMs! + 3_000; wall() < until; await sleep(50)) {
      if ((await sleepingBackends(this.admin, worker.name)) === 0) break;
    }
    this.lastOrphanAt = wall();
    return `${worker.name} killed${hit ? ' with its confirmation stalled' : ''}`;
  }

  private pauseOf(name: string): Array<[number, number]> {
    if (!this.pauses.has(name)) this.pauses.set(name, []);
    return this.pauses.get(name)!;
  }

  /** Ends the worker's connections of the step's role; at `inside-fence`, only the fenced transaction's. */
  private async terminate(name: string, step: Step): Promise<number> {
    const app = step.role === 'pool' ? name : `${name}:${step.role}`;
    const only = step.role === 'pool' && step.phase === 'inside-fence' ? `AND state = 'idle in transaction'` : '';
    const { rows } = await this.admin.query<{ n: number }>(
      `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
       WHERE datname = current_database() AND application_name = $1 ${only}`,
      [app],
    );
    return rows[0].n;
  }

  /** `close()` while the worker's calls run, then the promise of "nothing outlives its caller" (`close-check.ts`). */
  private async closeAndCheck(slot: Slot, step?: Step): Promise<string[]> {
    const name = slot.worker!.name;
    const go = step && (() => this.go(slot, step));
    const { problems, rowsLeft } = await closeAndCheck(this.url, slot.worker!, go);
    if (rowsLeft) this.lastOrphanAt = wall();
    for (const detail of problems) {
      this.violations.push({ invariant: 'close leaves nothing', detail: `${name}: ${detail}`, step: step?.index });
    }
    return problems;
  }

  /**
   * Every fault healed, every worker closed while its calls run (each checked as above), then, once every row left
   * by a kill has had its lease timeout: no live lease row, no live waiter row, no connection of any worker.
   */
  private async settle(): Promise<void> {
    await disarmRacepoints(this.admin);
    await this.drains?.undrainAll();
    for (const slot of this.slots) slot.proxy.thaw();
    await Promise.all(this.slots.map((slot) => slot.ready));
    await Promise.all(this.slots.map((slot) => this.closeAndCheck(slot)));
    const timeout = Math.max(LEASE.timing!.leaseTimeoutMs!, LEASE.timing!.waiterTimeoutMs!);
    await sleep(Math.max(0, this.lastOrphanAt + timeout + 500 - wall()));
    const { rows } = await this.admin.query<{ what: string }>(`
      SELECT format('live lease row %s of %s', target_id, owner) AS what FROM job_lease
      WHERE lease_token IS NOT NULL AND updated_at + lease_timeout_ms * interval '1 millisecond' > clock_timestamp()
      UNION ALL
      SELECT format('live waiter row %s of %s', target_id, owner) FROM job_lease_waiter
      WHERE heartbeat_at + timeout_ms * interval '1 millisecond' > clock_timestamp()
      UNION ALL
      SELECT format('server connection %s (%s)', application_name, state) FROM pg_stat_activity
      WHERE datname = current_database() AND application_name ~ '^w[0-9]+[.]'`);
    for (const { what } of rows) this.violations.push({ invariant: 'settled: nothing left', detail: what });
  }
}
