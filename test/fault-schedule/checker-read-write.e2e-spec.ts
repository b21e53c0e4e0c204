/**
 * The read-write checks of the fault schedule's checker (checker-read-write.ts) against histories written by hand in
 * the lease table and the fenced-write history, as the workers' statements would leave them: each broken on purpose
 * must be flagged under its own invariant, the same history without the defect must pass. (The held-window check,
 * which reads only the workers' reports, is in checker.e2e-spec.ts beside the other modes'.)
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { Received } from '../faults/support/harness.js';
import { rwTarget } from './checker-read-write.js';
import { checkRun } from './checker.js';
import type { ScheduleMessage } from './protocol.js';
import { useCheckerDatabase } from './checker-database.js';

const { as } = useCheckerDatabase('schedule_checker_rw', []);

const WRITER = 1;

/** A grant on a read-write key's row: the writer's (row slot 1, `slot_limit` -1) or a reader's (above, 0). */
async function grant(c: pg.Client, key: string, slot: number, token: bigint, owner: string): Promise<void> {
  await c.query(
    `INSERT INTO job_lease AS l (target_id, slot, lease_token, fencing_token, owner, priority, lease_timeout_ms,
       acquired_at, updated_at, hold_ms, slot_limit)
     VALUES ($1, $2, $3::uuid, $4, $5, 0, 1500, clock_timestamp(), clock_timestamp(), 0, $6)
     ON CONFLICT (target_id, slot) DO UPDATE SET lease_token = EXCLUDED.lease_token,
       fencing_token = EXCLUDED.fencing_token, owner = EXCLUDED.owner, acquired_at = EXCLUDED.acquired_at,
       updated_at = EXCLUDED.updated_at`,
    [key, slot, randomUUID(), token.toString(), owner, slot === WRITER ? -1 : 0],
  );
}

const release = (c: pg.Client, key: string, slot: number) =>
  c.query('UPDATE job_lease SET lease_token = NULL WHERE target_id = $1 AND slot = $2', [key, slot]);

/** A committed fenced write of a read-write lease (its own target and counter), and the worker's report of it. */
async function write(c: pg.Client, key: string, token: bigint, worker: string): Promise<Received<ScheduleMessage>> {
  const opId = randomUUID();
  const target = rwTarget(key, token);
  await c.query(`INSERT INTO fault_counter VALUES ($1, 1) ON CONFLICT (target) DO UPDATE SET n = fault_counter.n + 1`, [
    target,
  ]);
  await c.query(`INSERT INTO fault_history VALUES ($1, $2, $3, $4, nextval('fault_commit_seq'), clock_timestamp())`, [
    opId,
    target,
    token.toString(),
    worker,
  ]);
  const msg: ScheduleMessage = {
    t: 'write',
    opId,
    key: target,
    fencingToken: token.toString(),
    outcome: 'ack',
    afterLoss: false,
  };
  return { at: 0, worker, msg };
}

async function violations(log: Received<ScheduleMessage>[] = []): Promise<string[]> {
  const { violations: found } = await checkRun(await as('fault-harness'), log, new Map());
  return found.map((v) => `${v.invariant}: ${v.detail}`);
}

test("read-write: a writer's token above every earlier grant: a writer below a reader, a reader below the writer", async () => {
  const a = await as('w0.1');
  const b = await as('w1.1');
  // rw0, clean: two readers, then the writer above both, then a reader above the writer.
  await grant(a, 'rw0', 2, 10n, 'w0.1');
  await grant(b, 'rw0', 3, 11n, 'w1.1');
  await release(a, 'rw0', 2);
  await release(b, 'rw0', 3);
  await grant(a, 'rw0', WRITER, 12n, 'w0.1');
  await release(a, 'rw0', WRITER);
  await grant(b, 'rw0', 2, 14n, 'w1.1');
  // rw1: the writer's token below a reader's granted before it; then a reader's below the writer's.
  await grant(a, 'rw1', 2, 20n, 'w0.1');
  await grant(b, 'rw1', 3, 22n, 'w1.1');
  await release(a, 'rw1', 2);
  await release(b, 'rw1', 3);
  await grant(a, 'rw1', WRITER, 21n, 'w0.1');
  await release(a, 'rw1', WRITER);
  await grant(b, 'rw1', 2, 19n, 'w1.1');
  expect(await violations()).toEqual([
    expect.stringMatching(
      /^read-write: a writer's token above every earlier grant: rw1: a writer was granted token 21 \(w0.1, #\d+\) after token 22 /,
    ),
    expect.stringMatching(
      /^read-write: a writer's token above every earlier grant: rw1: a reader was granted token 19 \(w1.1, #\d+\) after the writer's token 21 /,
    ),
  ]);
});

test('read-write: no fenced write beside a writer: a reader writing while the writer holds is flagged', async () => {
  const a = await as('w0.1');
  const b = await as('w1.1');
  await grant(b, 'rw0', 2, 9n, 'w1.1');
  const log = [await write(b, 'rw0', 9n, 'w1.1')]; // before the writer: fine
  await grant(a, 'rw0', WRITER, 10n, 'w0.1');
  log.push(await write(a, 'rw0', 10n, 'w0.1')); // the writer's own
  log.push(await write(b, 'rw0', 9n, 'w1.1')); // a second write of reader 9, inside the writer's hold
  await release(a, 'rw0', WRITER);
  await release(b, 'rw0', 2);
  await grant(b, 'rw0', 3, 11n, 'w1.1');
  log.push(await write(b, 'rw0', 11n, 'w1.1')); // after the writer's release: fine
  expect(await violations(log)).toEqual([
    expect.stringMatching(
      /^read-write: no fenced write beside a writer: rw0: write #3 of token 9 \(w1.1\) committed \d+ ms into the hold of writer w0.1 \(token 10\)$/,
    ),
  ]);
});
