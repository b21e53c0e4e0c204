/**
 * The checker: reads fault_history and fault_counter from the database and the workers' reports, and lists every
 * violation of the guarantees (docs/guarantees.md) it can see. What is checked:
 *
 * 1. Fenced exclusion / monotonic fencing: per target, in commit order (`commit_seq`, taken inside the fenced
 *    transaction while the lease row is locked), fencing tokens never go down. A row whose token is lower than one
 *    already committed on that target is an older lease committing after a newer one — also covers "nothing
 *    committed after the lease was lost", since a lease is only ever lost to a newer acquisition or to expiry.
 * 2. One holder per token: every fencing token in the history was written by one worker only.
 * 3. Counters: each target's read-modify-write counter equals its number of history rows (a lost update means two
 *    writers overlapped inside what should have been exclusive).
 * 4. Nothing lost: every write a worker acknowledged is in the history.
 * 5. Refusals leave nothing: a write refused with LeaseLostError is not in the history.
 * 6. No write after a reported loss: a write attempted after the worker saw its lease's signal abort is refused, and
 *    is not in the history (worker-local order, so no clocks are compared).
 * 7. Semaphores (`limits`: a key's limit): a slot's writes are under `<key>#<slot>`, so 1–5 hold per slot; per key,
 *    every slot is below the limit, and in commit order never more than `limit` leases are between their first and
 *    last committed write at once (overlapping holders).
 * Writes whose outcome the worker could not know (connection killed around COMMIT) are resolved from the history and
 * counted, not judged.
 */
import type pg from 'pg';
import type { Received } from './harness.js';

export interface CheckResult {
  /** History rows (committed fenced writes) examined. */
  writes: number;
  acked: number;
  refused: number;
  unknown: { committed: number; notCommitted: number };
  /** Committed rows no report mentions (a worker killed before it could report). */
  unreported: number;
  lostEvents: number;
  violations: string[];
}

interface HistoryRow {
  op_id: string;
  target: string;
  fencing_token: string;
  worker: string;
  seq: string;
}

export async function check(
  admin: pg.Client,
  log: Received[],
  limits: ReadonlyMap<string, number> = new Map(),
): Promise<CheckResult> {
  const history = (
    await admin.query<HistoryRow>(
      `SELECT op_id::text, target, fencing_token::text, worker, commit_seq::text AS seq FROM fault_history h ORDER BY h.commit_seq`,
    )
  ).rows;
  const counters = (await admin.query<{ target: string; n: string }>(`SELECT target, n::text FROM fault_counter`)).rows;
  const violations: string[] = [];

  const highest = new Map<string, bigint>();
  const writerOf = new Map<string, string>();
  const rowsPerTarget = new Map<string, number>();
  for (const row of history) {
    const token = BigInt(row.fencing_token);
    const top = highest.get(row.target);
    if (top !== undefined && token < top) {
      violations.push(`${row.target}: token ${token} (${row.worker}) committed at #${row.seq} after token ${top}`);
    } else highest.set(row.target, token);
    const writer = writerOf.get(row.fencing_token);
    if (writer !== undefined && writer !== row.worker) {
      violations.push(`token ${token} written by both ${writer} and ${row.worker}`);
    }
    writerOf.set(row.fencing_token, row.worker);
    rowsPerTarget.set(row.target, (rowsPerTarget.get(row.target) ?? 0) + 1);
  }
  violations.push(...slotViolations(history, limits));
  for (const { target, n } of counters) {
    const rows = rowsPerTarget.get(target) ?? 0;
    if (Number(n) !== rows) violations.push(`${target}: counter ${n} but ${rows} committed writes (lost update)`);
  }

  const committed = new Set(history.map((row) => row.op_id));
  const reported = new Set<string>();
  const result: CheckResult = {
    writes: history.length,
    acked: 0,
    refused: 0,
    unknown: { committed: 0, notCommitted: 0 },
    unreported: 0,
    lostEvents: 0,
    violations,
  };
  for (const { worker, msg } of log) {
    if (msg.t === 'lost') result.lostEvents++;
    if (msg.t !== 'write') continue;
    reported.add(msg.opId);
    const inHistory = committed.has(msg.opId);
    if (msg.outcome === 'ack') {
      result.acked++;
      if (!inHistory) violations.push(`acknowledged write ${msg.opId} of ${worker} is missing`);
    } else if (msg.outcome === 'refused') {
      result.refused++;
      if (inHistory) violations.push(`refused write ${msg.opId} of ${worker} committed`);
    } else if (inHistory) result.unknown.committed++;
    else result.unknown.notCommitted++;
    if (msg.afterLoss && (msg.outcome !== 'refused' || inHistory)) {
      violations.push(
        `${worker} wrote on ${msg.key} (token ${msg.fencingToken}) after its lease was lost: ${msg.outcome}${inHistory ? ', committed' : ''}`,
      );
    }
  }
  result.unreported = history.filter((row) => !reported.has(row.op_id)).length;
  return result;
}

/** Check 7: per semaphore key (`limits`), slots below the limit and at most `limit` overlapping holders. */
function slotViolations(history: readonly HistoryRow[], limits: ReadonlyMap<string, number>): string[] {
  const violations: string[] = [];
  const byKey = new Map<string, HistoryRow[]>();
  for (const row of history) {
    const at = row.target.lastIndexOf('#');
    const key = at < 0 ? row.target : row.target.slice(0, at);
    const limit = limits.get(key);
    // `limit` 1 is a single holder's key (no slots): checks 1–6 judge it.
    if (limit === undefined || limit <= 1) continue;
    const slot = Number(row.target.slice(at + 1));
    if (at < 0 || !(slot >= 0 && slot < limit)) violations.push(`${row.target}: not a slot of ${key} (limit ${limit})`);
    byKey.set(key, [...(byKey.get(key) ?? []), row]);
  }
  for (const [key, rows] of byKey) {
    const limit = limits.get(key)!;
    // Each lease (token) spans its first to its last committed write, in commit order.
    const last = new Map<string, number>();
    rows.forEach((row, index) => last.set(row.fencing_token, index));
    const open = new Set<string>();
    rows.forEach((row, index) => {
      open.add(row.fencing_token);
      if (open.size > limit) {
        violations.push(`${key}: ${open.size} holders overlapping at commit #${row.seq} (limit ${limit})`);
      }
      if (last.get(row.fencing_token) === index) open.delete(row.fencing_token);
    });
  }
  return violations;
}
