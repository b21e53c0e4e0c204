/**
 * What every call of a workload process of the fault schedule shares (`worker.ts` and `worker-modes.ts`): its
 * config, the event-loop monitor, the messages to the runner, the aimed phases, and a lease's work (fenced writes).
 */
import type { LoggerService } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import type { DataSource, EntityManager } from 'typeorm';
import { useStatementFaults } from '../../libs/lease/src/internal.js';
import {
  LeaseBusyError,
  LeaseDrainedError,
  LeaseLostError,
  LeaseShutdownError,
  LeaseUnavailableError,
  LeaseWaitTimeoutError,
  type Lease,
  type LeaseService,
  type RunOptions,
} from '../../libs/lease/src/index.js';
import { recordWrite } from '../faults/support/history.js';
import type { WriteOutcome } from '../faults/support/protocol.js';
import { sleep } from '../support/sleep.js';
import type { OpKind, Phase, ScheduleMessage, ScheduleWorkerConfig, WaitRecord } from './protocol.js';
import type { Random } from './schedule.js';

export const config = JSON.parse(process.argv[2]) as ScheduleWorkerConfig;

// The runner is gone, or this process ran too long: leave without cleanup (leases and waiter rows expire).
const parentPid = process.ppid;
process.on('disconnect', () => process.exit(0));
setInterval(() => process.ppid !== parentPid && process.exit(0), 250).unref();
setTimeout(() => process.exit(3), config.maxLifetimeMs).unref();

export const wall = () => performance.timeOrigin + performance.now();

/**
 * The event-loop monitor: the lateness of a 50 ms tick is time this process could not run (stopped, starved of CPU
 * on a shared machine, or blocked). Summed, so a wait knows how much of its duration was not the library's.
 */
const TICK_MS = 50;
export let stalledMs = 0;
let lastTick = performance.now();
setInterval(() => {
  const now = performance.now();
  const late = now - lastTick - TICK_MS;
  lastTick = now;
  sampleHeld();
  if (late <= 10) return;
  stalledMs += late;
  if (late >= 250) send({ t: 'stall', ms: Math.round(late), at: wall() });
}, TICK_MS).unref();

/**
 * Local safety's evidence: per lease held here, the last time its `isHeld()` said true (the time read before the call,
 * so the lease was ours then). Reported when the lease ends (`heldUntil`).
 */
const lastHeld = new Map<string, number>();
function sampleHeld(): void {
  for (const lease of leases?.heldLeases() ?? []) {
    const at = Date.now();
    if (lease.isHeld()) lastHeld.set(lease.fencingToken.toString(), at);
  }
}

/** A lease ended here (lost or released): the last time it was seen held, for the checker. */
export function heldUntil(key: string, fencingToken: string): void {
  const lastHeldAt = lastHeld.get(fencingToken);
  lastHeld.delete(fencingToken);
  if (lastHeldAt !== undefined) send({ t: 'held', key, fencingToken, lastHeldAt });
}

export function send(message: ScheduleMessage): void {
  if (process.connected) process.send!(message);
}

/** Warnings and errors go to the worker's log file; during close() the warnings are also kept for the runner. */
export const closeWarnings: string[] = [];
export let closing = false;
/** `close()` began: the loops stop drawing calls, and warnings are kept for the runner. */
export function startClosing(): void {
  closing = true;
}
export const logger: LoggerService = {
  log: () => undefined,
  debug: () => undefined,
  verbose: () => undefined,
  warn: (message: unknown, ...rest: unknown[]) => {
    const text = [message, ...rest].map(String).join(' ');
    if (closing) closeWarnings.push(text);
    console.warn(`${new Date().toISOString()} WARN ${text}`);
  },
  error: (message: unknown, ...rest: unknown[]) =>
    console.error(`${new Date().toISOString()} ERROR ${[message, ...rest].map(String).join(' ')}`),
  fatal: (message: unknown, ...rest: unknown[]) =>
    console.error(`${new Date().toISOString()} FATAL ${[message, ...rest].map(String).join(' ')}`),
};

// --- aimed phases -------------------------------------------------------------------------------------------------

export const armed = new Map<Phase, number>();
export const goes = new Map<number, () => void>();
/** A call held at a phase goes on by itself after this long, whatever the runner does. */
const HELD_AT_PHASE_MS = 15_000;

/** Reports reaching `phase` when a step is armed for it, and holds the call there until the runner's `go`. */
export async function phase(name: Phase, lease?: Lease, hold = true): Promise<void> {
  const step = armed.get(name);
  if (step === undefined) return;
  armed.delete(name);
  const go = new Promise<void>((resolve) => {
    goes.set(step, resolve);
    setTimeout(resolve, HELD_AT_PHASE_MS).unref();
  });
  send({ t: 'hit', step, phase: name, key: lease?.targetKey, fencingToken: lease?.fencingToken.toString() });
  if (hold) await go;
  goes.delete(step);
}

// --- the workload ---------------------------------------------------------------------------------------------------

export let leases!: LeaseService;
export let dataSource!: DataSource;

/** The application's LeaseService and DataSource, once it started (before the first call). */
export function attach(service: LeaseService, source: DataSource): void {
  leases = service;
  dataSource = source;
  // The negative control: the service's store rebuilds its statements with the fault, before the first call.
  if (config.tokenBeforeLock || config.readerBesideWriter || config.renewOneLength) {
    useStatementFaults(service, {
      tokenBeforeLock: config.tokenBeforeLock,
      readerBesideWriter: config.readerBesideWriter,
      renewOneLength: config.renewOneLength,
    });
  }
}

export function op(
  kind: OpKind,
  outcome: string,
  extra: { calls?: number; wait?: WaitRecord; error?: unknown } = {},
): void {
  const error = extra.error === undefined ? undefined : errorText(extra.error);
  send({ t: 'op', op: kind, outcome, calls: extra.calls, wait: extra.wait, error });
}

export function errorText(error: unknown): string {
  return (error instanceof Error ? `${error.name}: ${error.message}` : JSON.stringify(error)).slice(0, 300);
}

/** How a call that waited (or could have) ended. */
export function outcomeOf(error: unknown): string {
  if (error instanceof LeaseWaitTimeoutError) return 'timeout';
  if (error instanceof LeaseDrainedError) return 'drained';
  if (error instanceof LeaseBusyError) return 'busy';
  if (error instanceof LeaseShutdownError) return 'shutdown';
  if (error instanceof LeaseUnavailableError) return 'unavailable';
  if (error instanceof LeaseLostError) return 'lost';
  if (error instanceof DOMException && error.name === 'AbortError') return 'aborted';
  return 'error';
}

/**
 * A fenced write (or, as the fence-off control, the same rows in a plain transaction). `afterLoss`: the lease's
 * signal had aborted because it was lost — a release or a shutdown also aborts it, but those are no loss.
 */
export async function fencedWrite(lease: Lease): Promise<WriteOutcome> {
  const opId = randomUUID();
  const afterLoss = lease.signal.aborted && lease.signal.reason instanceof LeaseLostError;
  const work = async (manager: EntityManager) => {
    await phase('inside-fence', lease);
    await recordWrite(manager, {
      opId,
      target: lease.targetKey,
      fencingToken: lease.fencingToken,
      worker: config.name,
    });
  };
  let outcome: WriteOutcome;
  let error: string | undefined;
  try {
    if (config.unfenced) await dataSource.transaction(work);
    else await lease.fenced(work);
    outcome = 'ack';
  } catch (caught) {
    // A refusal wrote nothing; any other failure (a connection ended around COMMIT) may have committed or not: the
    // checker resolves it from the history table.
    outcome = caught instanceof LeaseLostError ? 'refused' : 'unknown';
    error = String(caught).slice(0, 300);
  }
  const fencingToken = lease.fencingToken.toString();
  send({ t: 'write', opId, key: lease.targetKey, fencingToken, outcome, afterLoss, error });
  return outcome;
}

/** The work of a lease: a moment of "external work" (cut short by the signal), then one or two fenced writes. */
export async function work(lease: Lease, random: Random): Promise<void> {
  await phase('holding', lease);
  await sleep(random.int(0, 60), lease.signal);
  const writes = random.int(1, 2);
  for (let i = 0; i < writes; i++) await fencedWrite(lease);
}

export async function release(lease: Lease): Promise<void> {
  await phase('releasing', lease);
  await lease.release();
  op('release', 'ok');
}

/**
 * `leases.run(key, work, …)` refusing (`waitTimeoutMs` undefined) or waiting, reported as one `op` of `kind`: `granted`
 * when the work ran to its end, `work-failed` when it threw, else the refusal's outcome; a call that waited also
 * reports its wait (to its grant, or to its end when none came), judged against its bound.
 */
export async function reportedRun(
  kind: OpKind,
  granted: string,
  key: string,
  call: { priority: number; waitTimeoutMs?: number; mode?: 'shared' | 'exclusive'; leaseTimeoutMs?: number },
  work: (lease: Lease) => Promise<void>,
): Promise<void> {
  const { priority, waitTimeoutMs, mode, leaseTimeoutMs } = call;
  const startedAt = wall();
  const stalledFrom = stalledMs;
  let grant: { at: number; stalled: number } | undefined;
  const wait = (endedAt: number, stalled: number): WaitRecord | undefined =>
    waitTimeoutMs === undefined
      ? undefined
      : { key, priority, boundMs: waitTimeoutMs, startedAt, endedAt, stalledMs: stalled - stalledFrom };
  const onBusy = waitTimeoutMs === undefined ? 'throw' : { wait: { timeoutMs: waitTimeoutMs } };
  const options: RunOptions =
    mode === undefined ? { leaseTimeoutMs, priority, onBusy } : { mode, leaseTimeoutMs, priority, onBusy };
  try {
    await leases.run(key, (lease) => ((grant = { at: wall(), stalled: stalledMs }), work(lease)), options);
    op(kind, granted, { wait: wait(grant!.at, grant!.stalled) });
  } catch (error) {
    if (grant) op(kind, 'work-failed', { error });
    else op(kind, outcomeOf(error), { wait: wait(wall(), stalledMs), error });
  }
}
