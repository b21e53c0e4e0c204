/**
 * The schedule: a seeded PRNG and the steps it draws. A seed fixes every step — which fault, after how much workload,
 * against which worker, aimed at which phase, for how long — so the same seed gives the same schedule on any machine;
 * only real time varies (a step waits for its aim instead of hoping a timer lands in the right window).
 */
import type { Phase } from './protocol.js';

/** mulberry32: a 32-bit state, fast, good enough to draw schedules (not for anything secret). */
export class Random {
  private state: number;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)];
  }

  /** One of the keys of `weights`, with probability proportional to its weight. */
  weighted<K extends string>(weights: Readonly<Record<K, number>>): K {
    const entries = Object.entries(weights) as Array<[K, number]>;
    let left = this.next() * entries.reduce((sum, [, weight]) => sum + weight, 0);
    for (const [key, weight] of entries) {
      left -= weight;
      if (left < 0) return key;
    }
    return entries[entries.length - 1][0];
  }
}

/** A 32-bit seed derived from several numbers (a run's seed, a worker slot, an incarnation, a loop). */
export function deriveSeed(...parts: number[]): number {
  let h = 0x811c9dc5;
  for (const part of parts) {
    h = Math.imul(h ^ (part >>> 0), 0x01000193);
    h ^= h >>> 13;
    h = Math.imul(h, 0x5bd1e995);
    h ^= h >>> 15;
  }
  return h >>> 0;
}

export const FAULT_KINDS = [
  'sigkill',
  'sigstop',
  'backend-kill',
  'proxy-delay',
  'proxy-drop',
  'proxy-blackhole',
  'pg-restart',
  'racepoint',
  'close-restart',
  'drain',
  'handoff-crash',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** The fault mix of version 1: relative weights of its kinds (printed with every run). */
export const FAULT_MIX: Readonly<Record<Exclude<FaultKind, ModeKind>, number>> = {
  sigkill: 9,
  sigstop: 16,
  'backend-kill': 13,
  'proxy-delay': 6,
  'proxy-drop': 5,
  'proxy-blackhole': 7,
  'pg-restart': 3,
  racepoint: 30,
  'close-restart': 8,
};

/**
 * Racepoints: a trigger armed for one owner for a moment, whose statement sleeps in the server at that point.
 * - `acquire-insert`: an acquisition's row proposed for insertion (BEFORE INSERT on the lease table): after the
 *   statement evaluated its source row (and drew anything drawn there), before conflict detection and the row lock;
 * - `acquire-inserted`: a new key's row inserted (AFTER INSERT), its transaction not committed: every other
 *   acquisition of that key, single or batched, waits for it;
 * - `lease-row-locked`: an UPDATE of a lease row of that owner (a takeover or re-acquisition, a renewal, a release),
 *   with the row lock held;
 * - `enqueue`: a waiter row inserted (BEFORE INSERT on the waiter table);
 * - `waiter-heartbeat`: a waiter row renewed (BEFORE UPDATE on the waiter table);
 * - `dequeue`: a waiter row of that owner deleted (its own leaving, a grant's clean-up, an eviction);
 * - `fenced-write`: the history write inside `fenced()`, the lease row locked.
 */
export const RACEPOINTS = [
  'acquire-insert',
  'acquire-inserted',
  'lease-row-locked',
  'enqueue',
  'waiter-heartbeat',
  'dequeue',
  'fenced-write',
] as const;
export type Racepoint = (typeof RACEPOINTS)[number];
const RACEPOINT_MIX: Readonly<Record<Racepoint, number>> = {
  'acquire-insert': 30,
  'acquire-inserted': 10,
  'lease-row-locked': 20,
  enqueue: 15,
  'waiter-heartbeat': 8,
  dequeue: 10,
  'fenced-write': 12,
};

/**
 * Version 2 (issue 38): the modes where two features meet. A share of the steps is drawn from a stream of its own
 * (so every other step of a seed is the one version 1 drew) and aims at one of them:
 * - `sticky`: a fault of an existing kind aimed at the sticky job's owner while a sticky call runs (phase `sticky`);
 * - `drain`: the runner drains a join key through `LeaseOperator` for a while, then undrains it;
 * - `handoff-crash`: a release handed the key to a waiter of the worker, whose confirmation is stalled at the
 *   `confirm-grant` racepoint; then the server stops at once (`pg_ctl stop -m immediate`: SIGQUIT, no checkpoint, an
 *   asynchronous commit not yet flushed is lost) or the waiter is SIGKILLed.
 */
export const MODES_SHARE = 0.25;
export const MODE_MIX = { sticky: 40, drain: 30, 'handoff-crash': 30 } as const;
export type ModeKind = 'drain' | 'handoff-crash';
/** The sticky job's key (a fixed key: `@Sticky` takes no template). */
export const STICKY_KEY = 's0';
/** The keys joins are made on (the first hot keys), and so the keys a `drain` step drains. */
export const JOIN_KEYS = ['h0', 'h1', 'h2'] as const;
/** The kinds a sticky step draws (aimed at phase `sticky`), with the backend kill's roles. */
const STICKY_KINDS = ['sigkill', 'sigstop', 'sigstop', 'close-restart', 'proxy-blackhole', 'backend-kill'] as const;

/** Which of a worker's connections a backend kill ends. */
export type BackendRole = 'pool' | 'heartbeat' | 'waiters' | 'listen';

export interface Step {
  index: number;
  kind: FaultKind;
  /** The worker slot (its incarnation is whichever runs when the step comes). */
  worker: number;
  phase: Phase;
  /** Workload time before the step begins. */
  gapMs: number;
  /** How long the fault lasts: a pause, a proxy mode, the server down, a racepoint armed. */
  durationMs: number;
  role?: BackendRole;
  point?: Racepoint;
  /** Racepoint: how long each statement that reaches it sleeps. */
  sleepMs?: number;
  /** proxy-delay: added to every chunk each way. */
  delayMs?: number;
  /** sigkill, close-restart, handoff-crash by SIGKILL: how long the slot stays empty before its next incarnation. */
  restartAfterMs?: number;
  /** drain: the key drained (for `durationMs`). */
  key?: string;
  /** handoff-crash: the server stopped at once (down `durationMs`), or the waiter SIGKILLed. */
  crash?: 'server' | 'sigkill';
}

const PHASES_OF: Readonly<Record<Exclude<FaultKind, 'racepoint' | 'backend-kill' | ModeKind>, readonly Phase[]>> = {
  sigkill: ['any', 'holding', 'inside-fence', 'releasing', 'waiting', 'batch', 'long-holding'],
  sigstop: ['any', 'holding', 'holding', 'inside-fence', 'releasing', 'waiting', 'batch', 'long-holding'],
  'proxy-delay': ['any', 'holding', 'inside-fence', 'waiting', 'long-holding'],
  'proxy-drop': ['any', 'holding', 'inside-fence', 'waiting', 'releasing'],
  'proxy-blackhole': ['any', 'holding', 'inside-fence', 'waiting', 'long-holding'],
  'pg-restart': ['any', 'holding', 'inside-fence'],
  'close-restart': ['any', 'holding', 'waiting', 'batch', 'inside-fence'],
};
const ROLE_PHASES: Readonly<Record<BackendRole, readonly Phase[]>> = {
  pool: ['inside-fence', 'inside-fence', 'holding', 'waiting', 'batch', 'any'],
  heartbeat: ['holding', 'long-holding', 'any'],
  waiters: ['waiting'],
  listen: ['waiting', 'any'],
};

export interface ScheduleShape {
  workers: number;
  /** The workers' lease timeout: pauses and outages are drawn shorter and longer than it. */
  leaseTimeoutMs: number;
}

/**
 * The version of `stepOf`: any change to what it draws (the mix, the ranges, the order of the draws) changes every
 * seed's schedule, so it bumps this, and the seeds kept in regressions.json record the version they were found with.
 */
export const SCHEDULE_VERSION = 3;

/**
 * Step `index` of the schedule of `seed` under `version` (default the current one): a pure function of the three
 * (steps are drawn independently). A seed kept with version 1 replays exactly its steps.
 */
export function stepOf(seed: number, index: number, shape: ScheduleShape, version = SCHEDULE_VERSION): Step {
  const step = versionTwoStep(seed, index, shape, version);
  const modes = step.phase === 'sticky' || step.kind === 'drain' || step.kind === 'handoff-crash';
  if (version < 3 || modes) return step;
  return lengthStep(seed, index, step) ?? step;
}

/**
 * Version 3 (issue 43, item 3): a lease length per call. A share of version 1's steps (`LENGTH_SHARE`, from a stream
 * of its own: every other step, the modes' included, is version 2's) aims at a lease with a length of its own (phase `length-holding`,
 * worker-length.ts: 1,000 or 4,000 ms) a pause or an outage between the two lengths (1,300–3,700 ms), or a kill: the
 * short lease must be taken over, the long one ridden out — each by its own length, not the module's 1,500 ms.
 */
export const LENGTH_SHARE = 0.15;
const LENGTH_KINDS = ['sigstop', 'sigstop', 'proxy-blackhole', 'sigkill'] as const;

function lengthStep(seed: number, index: number, step: Step): Step | undefined {
  const random = new Random(deriveSeed(seed, index, 0x1e9, 0x5eed));
  if (!random.chance(LENGTH_SHARE)) return undefined;
  const kind = random.pick(LENGTH_KINDS);
  const base = { index, worker: step.worker, gapMs: step.gapMs, phase: 'length-holding' as const };
  if (kind === 'sigkill') return { ...base, kind, durationMs: 0, restartAfterMs: random.int(0, 1_500) };
  return { ...base, kind, durationMs: random.int(1_300, 3_700) };
}

function versionTwoStep(seed: number, index: number, shape: ScheduleShape, version: number): Step {
  const step = versionOneStep(seed, index, shape);
  if (version < 2) return step;
  const random = new Random(deriveSeed(seed, index, 0x30de5));
  if (!random.chance(MODES_SHARE)) return step;
  const base = { index, worker: step.worker, gapMs: step.gapMs };
  const lease = shape.leaseTimeoutMs;
  switch (random.weighted(MODE_MIX)) {
    case 'sticky': {
      // The worker is resolved when the step runs: the sticky owner's slot (else this one).
      const kind = random.pick(STICKY_KINDS);
      const phase: Phase = 'sticky';
      if (kind === 'sigkill' || kind === 'close-restart') {
        return { ...base, kind, phase, durationMs: 0, restartAfterMs: random.int(0, 1_000) };
      }
      if (kind === 'backend-kill') {
        return { ...base, kind, phase, role: random.pick<BackendRole>(['pool', 'heartbeat']), durationMs: 0 };
      }
      const long = random.chance(0.5);
      return {
        ...base,
        kind,
        phase,
        durationMs: long ? random.int(lease + 300, 2 * lease + 1_000) : random.int(150, lease - 300),
      };
    }
    case 'drain':
      return {
        ...base,
        kind: 'drain',
        phase: 'any',
        key: random.pick(JOIN_KEYS),
        durationMs: random.int(4_000, 8_000),
      };
    case 'handoff-crash': {
      const crash = random.chance(0.5) ? 'server' : 'sigkill';
      return {
        ...base,
        kind: 'handoff-crash',
        phase: 'any',
        crash,
        // Server: how long it stays down; the waiter: the confirmation's stall (it commits after the kill).
        durationMs: crash === 'server' ? random.pick([0, 300, 1_000, lease + 500]) : 0,
        sleepMs: crash === 'server' ? 2_500 : random.int(200, 1_500),
        restartAfterMs: random.int(0, 1_000),
      };
    }
  }
}

/** Version 1's step: every kind but the modes'. */
function versionOneStep(seed: number, index: number, shape: ScheduleShape): Step {
  const random = new Random(deriveSeed(seed, index, 0x5c4ed));
  const kind = random.weighted(FAULT_MIX);
  const worker = random.int(0, shape.workers - 1);
  const gapMs = random.int(300, 2_500);
  const lease = shape.leaseTimeoutMs;
  // Half shorter than the lease timeout (a blip the holder rides out), half past it (a takeover).
  const shortOrLong = () =>
    random.chance(0.5) ? random.int(150, lease - 300) : random.int(lease + 300, 2 * lease + 1_000);
  const base = { index, kind, worker, gapMs };
  switch (kind) {
    case 'racepoint': {
      const point = random.weighted(RACEPOINT_MIX);
      return { ...base, phase: 'any', point, durationMs: random.int(400, 2_500), sleepMs: random.int(200, 1_500) };
    }
    case 'backend-kill': {
      const role = random.pick<BackendRole>(['pool', 'pool', 'heartbeat', 'waiters', 'listen']);
      return { ...base, phase: random.pick(ROLE_PHASES[role]), role, durationMs: 0 };
    }
    case 'sigkill':
      return { ...base, phase: random.pick(PHASES_OF[kind]), durationMs: 0, restartAfterMs: random.int(0, 1_500) };
    case 'close-restart':
      return { ...base, phase: random.pick(PHASES_OF[kind]), durationMs: 0, restartAfterMs: random.int(0, 1_000) };
    case 'sigstop':
    case 'proxy-blackhole':
      return { ...base, phase: random.pick(PHASES_OF[kind]), durationMs: shortOrLong() };
    case 'proxy-drop':
      return { ...base, phase: random.pick(PHASES_OF[kind]), durationMs: random.int(200, lease + 1_000) };
    case 'proxy-delay':
      return {
        ...base,
        phase: random.pick(PHASES_OF[kind]),
        durationMs: random.int(500, 3_000),
        delayMs: random.pick([20, 80, 200, 450, 900]),
      };
    case 'pg-restart':
      return { ...base, phase: random.pick(PHASES_OF[kind]), durationMs: random.pick([0, 300, 1_000, lease + 500]) };
  }
}

/** One line per step, as printed with a failure and by `--dry-run`. */
export function describeStep(step: Step): string {
  const at =
    step.phase === 'any'
      ? ''
      : step.phase === 'sticky'
        ? ' at sticky (its owner, else that slot)'
        : ` at ${step.phase}`;
  const what = (() => {
    switch (step.kind) {
      case 'racepoint':
        return `racepoint ${step.point} for w${step.worker}: armed ${step.durationMs} ms, each statement sleeps ${step.sleepMs} ms`;
      case 'backend-kill':
        return `pg_terminate_backend of w${step.worker}'s ${step.role} connection(s)${at}`;
      case 'sigkill':
        return `SIGKILL w${step.worker}${at}, restarted ${step.restartAfterMs} ms later`;
      case 'close-restart':
        return `close() of w${step.worker}${at} while its calls run, restarted ${step.restartAfterMs} ms later`;
      case 'sigstop':
        return `SIGSTOP w${step.worker}${at} for ${step.durationMs} ms`;
      case 'proxy-delay':
        return `proxy of w${step.worker}: +${step.delayMs} ms each way for ${step.durationMs} ms${at}`;
      case 'proxy-drop':
        return `proxy of w${step.worker}: replies dropped for ${step.durationMs} ms${at}`;
      case 'proxy-blackhole':
        return `proxy of w${step.worker}: blackhole for ${step.durationMs} ms${at}`;
      case 'pg-restart':
        return `PostgreSQL restart (down ${step.durationMs} ms)${at ? `${at} of w${step.worker}` : ''}`;
      case 'drain':
        return `drain of ${step.key} for ${step.durationMs} ms (LeaseOperator), then undrain`;
      case 'handoff-crash':
        return step.crash === 'server'
          ? `handoff to w${step.worker}: its confirmation stalled, then an immediate server stop (down ${step.durationMs} ms)`
          : `handoff to w${step.worker}: its confirmation stalled ${step.sleepMs} ms, the waiter SIGKILLed, restarted ${step.restartAfterMs} ms later`;
    }
  })();
  return `#${step.index} after ${step.gapMs} ms: ${what}`;
}
