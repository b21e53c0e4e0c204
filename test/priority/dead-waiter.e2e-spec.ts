import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { eventually, useTestDatabase } from '../support/db.js';
import { startChild } from '../support/processes.js';
import { holderOf, procsOf, rowsOf, track, untilQueued } from './helpers.js';

const db = useTestDatabase('prio_dead');
const proc = procsOf(db);
const children: ChildProcess[] = [];
db.beforeDrop(() => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

const CHILD_WAITER_TIMEOUT_MS = 1_500;

interface Child {
  process: ChildProcess;
  owner: string;
  /** Resolves with the first message of this type. */
  next(type: string): Promise<Record<string, unknown>>;
}

/** A waiter in a process of its own (see waiter-child.ts). */
function spawnWaiter(key: string, priority: number, name: string): Child {
  const owner = `${name}-${process.hrtime.bigint().toString(36)}`;
  const child = startChild(join(process.cwd(), 'test/priority/waiter-child.ts'), {
    PRIORITY_WAITER: {
      url: db.url,
      key,
      priority,
      owner,
      options: {
        timing: {
          heartbeatIntervalMs: 100,
          // Its statements' bounds (an acquisition's: lease length minus margin) roomy for a loaded machine: at load 6
          // its enqueue never showed (1 s leases bound it to 900 ms). The test times the waiter's timeout only.
          leaseTimeoutMs: 4_000,
          waiterTimeoutMs: CHILD_WAITER_TIMEOUT_MS,
          waitPollIntervalMs: 200,
        },
      },
    },
  });
  children.push(child.process);
  return { process: child.process, owner, next: (type) => child.message(type, 30_000) };
}

/** Backends of a process: its pool (application_name = owner) and its heartbeat/LISTEN connections. */
async function backendsOf(owner: string) {
  const { rows } = await db.admin.query<{ state: string }>(
    `SELECT state FROM pg_stat_activity WHERE application_name = $1 OR application_name LIKE $1 || ':%'`,
    [owner],
  );
  return rows;
}

test.each(['SIGSTOP', 'SIGKILL'] as const)(
  'a waiter process that stops heartbeating (%s) is skipped after waiterTimeoutMs and its row removed',
  async (signal) => {
    const key = `dead:${signal}`;
    // The holder keeps the key while the child starts (seconds under load): a lease roomy enough that a stalled
    // renewal never hands the key to the child, which would then hold it instead of queueing (seen once in CI).
    const holder = await proc('holder', { timing: { leaseTimeoutMs: 10_000 } });
    const held = (await holder.service.tryAcquire(key))!;

    const dead = spawnWaiter(key, 5, `child-${signal}`);
    await dead.next('ready');
    const place = await untilQueued(db.admin, key, dead.owner);
    const next = await proc('next-p1');
    const nextCall = track(next.service.acquire(key, { priority: 1, onBusy: { wait: { timeoutMs: 30_000 } } }));
    await untilQueued(db.admin, key, next.owner);

    dead.process.kill(signal);
    // Once none of its statements is running, its row's heartbeat can no longer move.
    await eventually(
      () => backendsOf(dead.owner),
      (backends) =>
        signal === 'SIGKILL' ? backends.length === 0 : backends.every((backend) => backend.state === 'idle'),
      `${dead.owner} silent`,
    );
    const [{ heartbeat_at: lastHeartbeat }] = (
      await db.admin.query<{ heartbeat_at: string }>(
        'SELECT heartbeat_at::text AS heartbeat_at FROM job_lease_waiter WHERE target_id = $1 AND owner = $2',
        [key, dead.owner],
      )
    ).rows;

    await held.release();
    const lease = await nextCall.promise;
    expect(await holderOf(db.admin, key)).toBe(next.owner);
    // Skipped only once dead: the grant came no sooner than waiterTimeoutMs after its last heartbeat (database clock).
    const { rows } = await db.admin.query<{ waited: boolean; gap_ms: number }>(
      `SELECT acquired_at >= $2::timestamptz + $3 * interval '1 millisecond' AS waited,
         (extract(epoch FROM acquired_at - $2::timestamptz) * 1000)::float8 AS gap_ms
       FROM job_lease WHERE target_id = $1`,
      [key, lastHeartbeat, CHILD_WAITER_TIMEOUT_MS],
    );
    console.log(
      `${signal}: next waiter granted ${rows[0].gap_ms.toFixed(0)} ms after the dead waiter's last heartbeat`,
    );
    expect(rows[0].waited).toBe(true);
    // The live waiter's heartbeat (whoever looks next) removed the dead row.
    await eventually(
      () => rowsOf(db.admin, key, dead.owner),
      (found) => found.length === 0,
      'dead row removed',
    );

    if (signal === 'SIGSTOP') {
      // Woken up, the slow waiter finds its row gone and re-queues at its old place instead of being lost.
      dead.process.kill('SIGCONT');
      const back = await untilQueued(db.admin, key, dead.owner);
      expect([back.seq, back.queued_at]).toEqual([place.seq, place.queued_at]);
      await lease.release();
      await dead.next('granted');
      expect(await holderOf(db.admin, key)).toBe(dead.owner);
      dead.process.kill('SIGKILL');
    } else {
      await lease.release();
    }
  },
);
