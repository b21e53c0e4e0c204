/** Messages between the fault harness (parent) and its worker processes (IPC). Plain JSON: bigints travel as strings. */
import type { LeaseModuleOptions } from 'nest-pg-lease';

export interface LoopPlan {
  /** Concurrent loops in this process, all sharing one LeaseService. */
  loops: number;
  keys: string[];
  /** Leases per loop at most; the loop also stops at `durationMs`. */
  iterations: number;
  durationMs: number;
  /** Simulated external work between acquisition and the fenced writes (the lease signal cuts it short). */
  workMs: number;
  writesPerLease: number;
  /** Wait in the priority line for this long; 0 = tryAcquire and back off when busy. */
  waitTimeoutMs: number;
  /** Every other lease's last fenced write releases it in its transaction (`fenced(work, { release: true })`). */
  releaseWithLastSave?: boolean;
  /**
   * A semaphore (`limit`): up to this many holders per key, each writing its history under `<key>#<slot>` (see
   * `historyTarget`), so the checker judges every slot as a key of its own and counts the slots of each key.
   */
  limit?: number;
  /**
   * Preemption storms (issue 24): this share of the leases (0–1) is acquired with `preempt: true` at one of
   * `priorities` (chosen at random; the others at priority 0), waiting `graceMs` for the holder before the takeover.
   */
  preempt?: { share: number; priorities: number[]; graceMs: number };
  /**
   * This share of the leases (0–1) is a joinable run (`run(key, work, { onBusy: 'join' })`): its work makes the
   * fenced writes and returns the last one's op id; a call that got another run's outcome reports it (`joined`).
   */
  joinShare?: number;
  /** This share of the other leases (0–1) ignores its signal: its work takes `ms` whatever happens (a stubborn holder). */
  stubborn?: { share: number; ms: number };
}

export interface WorkerConfig {
  /** Also the PostgreSQL application_name, so the harness can find this worker's backends. */
  name: string;
  url: string;
  lease: LeaseModuleOptions;
  poolSize: number;
  /**
   * Negative control only: the "fenced" write runs in a plain transaction, without the lease row lock and token check.
   * The rows it writes have the same shape, so the same checker judges both.
   */
  unfenced: boolean;
  /**
   * Leader-election mode (issue 23): the worker stands for leadership of `key` (`LeaseService.elect`) and, while it
   * leads, writes through the term's lease every `writeEveryMs` — once more after the lease's signal aborts (the
   * fence, not the caller's diligence, must refuse it) — until stopped.
   */
  elect?: { key: string; priority: number; writeEveryMs: number };
  /** Absent (and no `elect`): scripted mode (the parent sends commands). */
  loop?: LoopPlan;
  /** The process exits by itself after this long whatever happens. */
  maxLifetimeMs: number;
}

export type WriteOutcome = 'ack' | 'refused' | 'unknown';

export type WorkerMessage =
  | { t: 'ready' }
  | { t: 'acquired'; key: string; fencingToken: string }
  | { t: 'lost'; key: string; fencingToken: string; reason: string }
  | { t: 'aborted'; key: string; fencingToken: string }
  | {
      t: 'write';
      opId: string;
      key: string;
      fencingToken: string;
      outcome: WriteOutcome;
      /** The worker had already seen its lease's signal abort when it attempted this write. */
      afterLoss: boolean;
      error?: string;
    }
  | { t: 'inside'; opId: string }
  /** A NOTIFY handed this worker a grant (`dieOnGrant`): it dies once this is sent. */
  | { t: 'grant-heard'; fencingToken: string }
  | { t: 'preempted'; key: string; fencingToken: string; previousFencingToken: string; forced: boolean }
  /** A joinable call settled with another run's outcome: that run's last fenced write and its token. */
  | { t: 'joined'; key: string; opId: string; fencingToken: string }
  | { t: 'reply'; id: number; ok: boolean; value?: unknown; error?: string }
  | { t: 'done'; leases: number; busy: number; waitTimeouts: number; errors: number; joins?: number };

export type Command =
  /**
   * `dieOnGrant`: the process kills itself (SIGKILL) the moment a NOTIFY hands it a grant (direct handoff), before it
   * can confirm it — the fault between grant and confirmation, aimed exactly.
   */
  | { op: 'acquire'; key: string; waitTimeoutMs?: number; dieOnGrant?: boolean }
  | { op: 'write'; key: string; opId: string; holdInside?: boolean }
  | { op: 'release'; key: string }
  | { op: 'exit' };

export type ParentMessage = { t: 'cmd'; id: number; cmd: Command } | { t: 'proceed'; opId: string } | { t: 'stop' };
