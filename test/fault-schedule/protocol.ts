/**
 * Messages between the fault schedule's runner (parent) and its workload processes (`worker.ts`), over IPC. Plain
 * JSON: bigints travel as strings, times are wall-clock milliseconds (`performance.timeOrigin + performance.now()`,
 * comparable between processes of one machine).
 */
import type { LeaseModuleOptions } from 'nest-pg-lease';
import type { WorkerMessage as FaultWorkerMessage } from '../faults/support/protocol.js';

/**
 * Named points of the workload where a step can aim: the worker reports reaching one (`hit`) and, except for
 * `waiting`, holds that call there until the runner says `go` (after it has injected the fault).
 * - `holding`: a lease just granted (tryAcquire, acquire, run, an @Exclusive handler), before its work;
 * - `inside-fence`: inside `fenced()`, the lease row locked, before the history write;
 * - `releasing`: just before an explicit `release()`;
 * - `waiting`: a call of this process queued in line (the `waiting` event); not held;
 * - `batch`: just before many acquisitions are made in one turn of the event loop;
 * - `long-holding`: a long holder has its many leases, before it sits on them;
 * - `length-holding`: a lease with a length of its own (1,000 or 4,000 ms) holds, before its work (worker-length.ts);
 * - `sticky`: a sticky job's call running on its owner (the term's lease), before its work;
 * - `any`: no aim, the fault lands wherever the workload is.
 */
export type Phase =
  'any' | 'holding' | 'inside-fence' | 'releasing' | 'waiting' | 'batch' | 'long-holding' | 'sticky' | 'length-holding';

export interface ScheduleWorkerConfig {
  /** Also the LeaseService `owner` and the pool's `application_name` (`<name>:heartbeat`, … for the library's own). */
  name: string;
  url: string;
  /** The workload's PRNG seed (from the run's seed, the worker's slot and its incarnation). */
  seed: number;
  lease: LeaseModuleOptions;
  poolSize: number;
  loops: number;
  hotKeys: string[];
  bulkKeys: string[];
  /** The hot keys joins are made on (and plain runs with a hold's tail, and the drains). */
  joinKeys: string[];
  /** Negative control: fenced writes in a plain transaction (no row lock, no token check). */
  unfenced: boolean;
  /** Negative control: `useStatementFaults(…, { tokenBeforeLock })` (with `maxBatchSize: 1` in `lease`). */
  tokenBeforeLock: boolean;
  /**
   * Negative control: each sticky call also starts the next one from inside its own call chain (a timer set in the
   * call), which the library treats as a nested call of the key — it borrows the term's lease and runs beside.
   */
  stickyOverlap: boolean;
  /** Negative control: `useMultiKeyOrder('skip-last')` — a multi-key run never takes its last key. */
  multiSkipLast: boolean;
  /** The read-write keys (their prefix is `RW_PREFIX` of checker-read-write.ts): only read-write calls take them. */
  rwKeys: string[];
  /** Negative control: `useStatementFaults(…, { readerBesideWriter })` — a reader is let in beside a writer. */
  readerBesideWriter: boolean;
  /**
   * Negative control: `useStatementFaults(…, { renewOneLength })` — a renewal gives every lease it renews the first
   * one's length.
   */
  renewOneLength: boolean;
  maxLifetimeMs: number;
}

/** The API calls of the workload, counted by outcome. */
export type OpKind =
  | 'tryAcquire'
  | 'acquire'
  | 'acquire-abort'
  | 'run'
  | 'run-wait'
  | 'http'
  | 'http-wait'
  | 'batch'
  | 'long'
  | 'join'
  | 'http-join'
  | 'run-hold'
  | 'sticky'
  | 'multi'
  | 'rw'
  | 'length'
  | 'release';

/**
 * A join (`run(key, work, { onBusy: 'join' })`, or `POST /j/:key`): from the call to its settling, on the system clock
 * (`Date.now()`, compared with the database's), and the fencing token of the run whose outcome it settled with.
 */
export interface JoinRecord {
  via: 'run' | 'http';
  key: string;
  /**
   * `own` (it ran the work itself: its own grant), `joined` (another run's value), `joined-error` (another run's
   * failure, `LeaseJoinedRunError`), `own-failed` (its own run failed), `drained` (`LeaseDrainedError`, over HTTP a
   * 503 with `drained`), or what `outcomeOf` says of any other error (over HTTP, the status).
   */
  outcome: string;
  fencingToken?: string;
  startedAt: number;
  endedAt: number;
}

/** A call that waited in line: how long it took to settle, against the bound it was given. */
export interface WaitRecord {
  key: string;
  priority: number;
  /** The smaller of waitTimeoutMs and the abort delay. */
  boundMs: number;
  startedAt: number;
  endedAt: number;
  /**
   * How long the process could not run during the wait (SIGSTOP, CPU starvation): the lateness of an event-loop
   * monitor's 50 ms ticks, summed over the wait.
   */
  stalledMs: number;
}

export type ScheduleMessage =
  | Extract<FaultWorkerMessage, { t: 'ready' | 'lost' | 'write' }>
  | { t: 'grant'; key: string; fencingToken: string; owner: string; at: number }
  | { t: 'released'; key: string; fencingToken: string }
  | { t: 'op'; op: OpKind; outcome: string; calls?: number; wait?: WaitRecord; error?: string }
  | { t: 'hit'; step: number; phase: Phase; key?: string; fencingToken?: string }
  /** A sticky call that ran (its body), on its owner: from its start to its end (`wall()` of the process). */
  | { t: 'sticky'; key: string; fencingToken: string; startedAt: number; endedAt: number }
  | ({ t: 'join' } & JoinRecord)
  /**
   * A multi-key run's work (`run([…])`): the keys it asked (global order), their fencing tokens, when the work began and
   * the last time its 20 ms sampler saw every lease held (`wall()`; none: never). No other multi-key work may hold one
   * of the keys within that window.
   */
  | { t: 'multi'; keys: string[]; fencingTokens: string[]; startedAt: number; lastHeldAt?: number }
  /**
   * A read-write run's work (`run(key, work, { mode })`): its mode, fencing token, when the work began and the last
   * time its 20 ms sampler saw the lease held (`wall()`; none: never). No writer's window may overlap another holder's
   * of the key (checker-read-write.ts).
   */
  | {
      t: 'rw';
      key: string;
      mode: 'shared' | 'exclusive';
      fencingToken: string;
      startedAt: number;
      lastHeldAt?: number;
    }
  /**
   * A lease with a length of its own (`run(key, work, { leaseTimeoutMs })`, issue 43 item 3), when its work began: its
   * row must carry that length after every renewal, and no other process may take it over before it ran out.
   */
  | { t: 'length'; key: string; fencingToken: string; leaseTimeoutMs: number }
  /**
   * A call that asked a length of its own, sent when it begins (`endedAt` absent) and again when it ends (`wall()`):
   * a grant it never got to work with (its wait ended meanwhile, its process was stopped) still carries its length.
   */
  | { t: 'length-call'; id: number; key: string; leaseTimeoutMs: number; startedAt: number; endedAt?: number }
  /**
   * A lease ended here (lost or released): the last time (`Date.now()`) a 50 ms sampler saw its `isHeld()` true,
   * the sample's time taken before the call. Local safety: nobody else may be granted the key before it.
   */
  | { t: 'held'; key: string; fencingToken: string; lastHeldAt: number }
  /** The event loop could not run for `ms` (a tick that late), ending at `at`. Reported from 250 ms on. */
  | { t: 'stall'; ms: number; at: number }
  | {
      t: 'closed';
      /** Local state once close() resolved: leases held and calls waiting (both must be 0). */
      held: number;
      waiting: number;
      closeMs: number;
      /** Library warnings logged during close() (a release or a dequeue that failed: its row expires by itself). */
      warnings: string[];
    }
  | { t: 'done' };

export type ScheduleParentMessage =
  | { t: 'arm'; step: number; phase: Phase }
  | { t: 'disarm'; step: number }
  | { t: 'go'; step: number }
  | { t: 'close' }
  | { t: 'exit' };
