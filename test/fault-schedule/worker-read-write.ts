/**
 * Read-write leases (issue 43, item 1) in a workload process of the fault schedule (`worker.ts`): `run(key, work,
 * { mode })` on the read-write keys (`rw0`, `rw1`: keys of their own, which no other call takes, so the single
 * holder's checks leave them to checker-read-write.ts) — shared or exclusive, refusing (`'throw'`) or waiting
 * 300–2,000 ms (the wait judged against its bound). The work samples `isHeld()` every 20 ms (the last time it saw its lease held, taken before the call:
 * local safety), holds 20–300 ms, makes one fenced write and reports its mode, token and held window (`rw`).
 *
 * Its fenced write goes to the lease's own history target, `<key>@<fencing token>` (its counter row made in the same
 * transaction): readers of a key write at once, so one target per key would judge them as one holder. The
 * read-write checks read the key and the token back from the target (`rwTarget`).
 *
 * The negative control (`readerBesideWriter`, set on the service by `attach` in worker-kit.ts) lets a reader in beside
 * a writer (a test-only statement fault of the library): their windows then overlap.
 */
import { randomUUID } from 'node:crypto';
import type { EntityManager } from 'typeorm';
import { LeaseLostError, type Lease } from '../../libs/lease/src/index.js';
import { recordWrite } from '../faults/support/history.js';
import type { WriteOutcome } from '../faults/support/protocol.js';
import { sleep } from '../support/sleep.js';
import { rwTarget } from './checker-read-write.js';
import type { Random } from './schedule.js';
import { config, phase, reportedRun, send, wall } from './worker-kit.js';

/**
 * A read-write call: a reader 60 % of the time, a writer otherwise; a priority of 0 or 1 (a reader may pass). A call
 * that waits reports its wait, judged against its bound like every wait (a writer waits for every reader to leave).
 */
export async function readWriteRun(random: Random): Promise<void> {
  const key = random.pick(config.rwKeys);
  const mode = random.chance(0.6) ? 'shared' : 'exclusive';
  const priority = random.int(0, 1);
  const waitTimeoutMs = random.chance(0.6) ? random.int(300, 2_000) : undefined;
  await reportedRun('rw', `${mode}-granted`, key, { priority, waitTimeoutMs, mode }, (lease) =>
    held(lease, mode, random),
  );
}

/** The work of a read-write lease: its held window sampled, a moment of work, one fenced write. */
async function held(lease: Lease, mode: 'shared' | 'exclusive', random: Random): Promise<void> {
  const startedAt = wall();
  let lastHeldAt: number | undefined;
  const sample = () => {
    const at = wall();
    if (lease.isHeld()) lastHeldAt = at;
  };
  sample();
  const sampler = setInterval(sample, 20);
  try {
    await phase('holding', lease);
    await sleep(random.int(20, 300), lease.signal).catch(() => undefined);
    sample();
    await fencedWrite(lease);
  } finally {
    clearInterval(sampler);
    const fencingToken = lease.fencingToken.toString();
    send({ t: 'rw', key: lease.targetKey, mode, fencingToken, startedAt, lastHeldAt });
  }
}

/** One fenced write to the lease's own target (its counter row made in the same transaction). */
async function fencedWrite(lease: Lease): Promise<void> {
  const afterLoss = lease.signal.aborted && lease.signal.reason instanceof LeaseLostError;
  const opId = randomUUID();
  const target = rwTarget(lease.targetKey, lease.fencingToken);
  let outcome: WriteOutcome;
  let error: string | undefined;
  try {
    await lease.fenced(async (manager: EntityManager) => {
      await manager.query('INSERT INTO fault_counter (target, n) VALUES ($1, 0) ON CONFLICT DO NOTHING', [target]);
      await recordWrite(manager, { opId, target, fencingToken: lease.fencingToken, worker: config.name });
    });
    outcome = 'ack';
  } catch (caught) {
    outcome = caught instanceof LeaseLostError ? 'refused' : 'unknown';
    error = String(caught).slice(0, 300);
  }
  const fencingToken = lease.fencingToken.toString();
  send({ t: 'write', opId, key: target, fencingToken, outcome, afterLoss, error });
}
