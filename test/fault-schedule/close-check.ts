/**
 * The runner's check of a worker's `close()` (moved out of runner.ts unchanged in substance): `close()` while the
 * worker's calls run, then the promise of "nothing outlives its caller".
 */
import type pg from 'pg';
import { connect, sleep, type Worker } from '../faults/support/harness.js';
import type { ScheduleMessage, ScheduleParentMessage } from './protocol.js';

const LIVE_LEASE = `(l.updated_at + l.lease_timeout_ms * interval '1 millisecond' > clock_timestamp())`;
const LIVE_WAITER = `(w.heartbeat_at + w.timeout_ms * interval '1 millisecond' > clock_timestamp())`;

const wall = () => performance.timeOrigin + performance.now();

/**
 * `close()` while the worker's calls run (`go`: lets a call held at an aimed phase go on), then: no lease held and no
 * call waiting in the process; no lease row and no waiter row of it left (unless the library logged that a release
 * or a dequeue failed — that row expires by itself); no connection of its own left; and once it has exited, no
 * connection of its pool. `problems`: what was not so; `rowsLeft`: some row of the owner was still there (it expires
 * by itself: the settling waits for it).
 */
export async function closeAndCheck(
  url: string,
  worker: Worker<ScheduleMessage, ScheduleParentMessage>,
  go?: () => void,
): Promise<{ problems: string[]; rowsLeft: boolean }> {
  // A client of its own: the settling closes every worker at once.
  const admin = await connect(url);
  try {
    return await closeAndCheckWith(admin, worker, go);
  } finally {
    await admin.end();
  }
}

async function closeAndCheckWith(
  admin: pg.Client,
  worker: Worker<ScheduleMessage, ScheduleParentMessage>,
  go?: () => void,
): Promise<{ problems: string[]; rowsLeft: boolean }> {
  const name = worker.name;
  const since = performance.now();
  const problems: string[] = [];
  const flag = (detail: string) => problems.push(detail);
  worker.post({ t: 'close' });
  go?.();
  const { msg } = await worker.waitFor((m) => m.t === 'closed', 'closed', 30_000, since);
  if (msg.t !== 'closed') throw new Error('unreachable');
  if (msg.held || msg.waiting)
    flag(`close() resolved with ${msg.held} lease(s) held and ${msg.waiting} call(s) waiting`);
  // Rows of the owner still taken: a lease the process was granted and did not lose, or a live waiter row. A row
  // whose grant the process never heard of (its statement committed after the caller gave up on it) and a waiter
  // row born dead (it landed after its statement's bound) are docs/waiting.md's "born dead" and docs/bounds.md's "expires": not judged here.
  const { rows } = await admin.query<{ what: string; token: string | null; live: boolean }>(
    `SELECT 'lease row ' || target_id AS what, fencing_token::text AS token, ${LIVE_LEASE} AS live
     FROM job_lease l WHERE owner = $1 AND lease_token IS NOT NULL
     UNION ALL SELECT 'waiter row ' || target_id, NULL, ${LIVE_WAITER} FROM job_lease_waiter w WHERE owner = $1`,
    [name],
  );
  const granted = new Set<string>();
  const lost = new Set<string>();
  for (const { msg: m } of worker.messages()) {
    if (m.t === 'grant') granted.add(m.fencingToken);
    if (m.t === 'lost') lost.add(m.fencingToken);
  }
  const left = rows.filter((r) => (r.token === null ? r.live : granted.has(r.token) && !lost.has(r.token)));
  const what = left.map((r) => `${r.what}${r.token ? ` (token ${r.token}, ${r.live ? 'live' : 'expired'})` : ''}`);
  if (left.length && msg.warnings.length === 0)
    flag(`close() resolved, no failure logged, but left ${what.join(', ')}`);
  const own = await sessionsLeft(admin, [`${name}:heartbeat`, `${name}:waiters`, `${name}:listen`]);
  if (own.length) flag(`close() resolved but its own connections are still open: ${own.join(', ')}`);
  worker.post({ t: 'exit' });
  const exited = await Promise.race([worker.exited.then(() => true), sleep(20_000).then(() => false)]);
  if (!exited) {
    flag('did not exit within 20 s of close()');
    worker.signal('SIGKILL');
    await worker.exited;
  }
  const pool = await sessionsLeft(admin, [name]);
  if (pool.length) flag(`exited, but ${pool.length} server connection(s) of its pool are left`);
  return { problems, rowsLeft: rows.length > 0 };
}

/** Backends of this database with one of these application names, after letting them go for up to 3 s. */
async function sessionsLeft(admin: pg.Client, names: string[]): Promise<string[]> {
  let left: string[] = [];
  for (const until = wall() + 3_000; wall() < until; await sleep(100)) {
    const { rows } = await admin.query<{ app: string }>(
      `SELECT application_name AS app FROM pg_stat_activity
       WHERE datname = current_database() AND application_name = ANY ($1::text[])`,
      [names],
    );
    left = rows.map((r) => r.app);
    if (!left.length) break;
  }
  return left;
}
