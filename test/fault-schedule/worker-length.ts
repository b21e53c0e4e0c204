/**
 * A lease length per call (issue 43, item 3) in a workload process of the fault schedule (`worker.ts`): `run(key,
 * work, { leaseTimeoutMs })` on a hot key with a length of its own — short (1,000 ms, below the module's 1,500 ms: the
 * least this module's timing allows is 975 ms) or long (4,000 ms: a SIGSTOP the schedule means to be taken over is
 * ridden out) — refusing (30 %) or waiting 300–2,000 ms. The work reports its length (`length`), holds 100–1,500 ms after the
 * `length-holding` phase (several heartbeats; schedule 3's length steps aim there), then makes the fenced writes of
 * every lease's work.
 *
 * Its lease is renewed with the process's other leases in one statement; the checker (checker-length.ts) judges that
 * every renewal left its row with its own length and that no other process took it over before that length ran out.
 * The negative control (`renewOneLength`, set by `attach` in worker-kit.ts) gives every lease of a renewal the first
 * one's length.
 */
import { sleep } from '../support/sleep.js';
import type { Random } from './schedule.js';
import { config, fencedWrite, phase, reportedRun, send, wall } from './worker-kit.js';

/** The lengths a call asks: shorter and longer than the module's `leaseTimeoutMs` (1,500 ms). */
export const CALL_LENGTHS_MS = [1_000, 4_000] as const;

let calls = 0;

export async function lengthRun(random: Random): Promise<void> {
  const key = random.pick(config.hotKeys);
  const leaseTimeoutMs = random.pick(CALL_LENGTHS_MS);
  const call = { t: 'length-call', id: ++calls, key, leaseTimeoutMs, startedAt: wall() } as const;
  send(call);
  try {
    await lengthCall(random, key, leaseTimeoutMs);
  } finally {
    send({ ...call, endedAt: wall() });
  }
}

async function lengthCall(random: Random, key: string, leaseTimeoutMs: number): Promise<void> {
  const priority = random.int(0, 3);
  const waitTimeoutMs = random.chance(0.7) ? random.int(300, 2_000) : undefined;
  await reportedRun('length', 'granted', key, { priority, waitTimeoutMs, leaseTimeoutMs }, async (lease) => {
    send({ t: 'length', key, fencingToken: lease.fencingToken.toString(), leaseTimeoutMs });
    await phase('length-holding', lease);
    await sleep(random.int(100, 1_500), lease.signal).catch(() => undefined);
    const writes = random.int(1, 2);
    for (let i = 0; i < writes; i++) await fencedWrite(lease);
  });
}
