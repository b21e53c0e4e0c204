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
 * - `any`: no aim, the fault lands wherever the workload is.
 */
export type Phase = 'any' | 'holding' | 'inside-fence' | 'releasing' | 'waiting' | 'batch' | 'long-holding';

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
  /** Negative control: fenced writes in a plain transaction (no row lock, no token check). */
  unfenced: boolean;
  /** Negative control: `useStatementFaults(…, { tokenBeforeLock })` (with `maxBatchSize: 1` in `lease`). */
  tokenBeforeLock: boolean;
  maxLifetimeMs: number;
}

/** The API calls of the workload, counted by outcome. */
export type OpKind =
  'tryAcquire' | 'acquire' | 'acquire-abort' | 'run' | 'run-wait' | 'http' | 'http-wait' | 'batch' | 'long' | 'release';

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
