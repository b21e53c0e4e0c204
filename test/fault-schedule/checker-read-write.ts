/**
 * The checks of read-write leases (docs/read-write.md) in the fault schedule, on the keys of their own (`RW_PREFIX`):
 * a read-write key has many holders at once (its readers, each on a row of the key), so the single holder's per-key
 * checks of checker.ts (tokens rising per key, fenced exclusion by the key's grants, no stale hands on releases —
 * a writer's grant clears expired readers' rows, a reader's clears a dead writer's) leave these keys to these:
 *
 * - **read-write: a writer overlaps no other holder** — per key, the held windows of the read-write works (`rw`
 *   reports: from the work's start to the last time its sampler saw the lease held, `wall()` of one machine): a
 *   writer's window meets no reader's and no other writer's. Readers' windows may overlap;
 * - **read-write: a writer's token above every earlier grant** — per key, in the order the server logged the grants
 *   (under the row locks that serialise them), a writer's grant (the writer's row, slot 1) carries a token above every
 *   grant of the key before it, readers' included; a reader's grant one above the last writer's;
 * - **read-write: no fenced write beside a writer** — per key, from a writer's grant to its end (its release, its
 *   row's next grant, or its token cleared by a reader's grant once it expired), on the database clock, no fenced
 *   write of another lease of the key committed (a reader's fenced transaction is refused once a writer holds).
 *
 * A read-write lease's fenced writes go to a history target of their own, `<key>@<token>` (`rwTarget`), so the fault
 * suite's per-target checks (tokens never down, counters, one writer per token) still judge each lease.
 */
import type { Received } from '../faults/support/harness.js';
import type { ScheduleMessage } from './protocol.js';

/** The prefix of the read-write keys: no other call of the workload takes a key that starts with it. */
export const RW_PREFIX = 'rw';

/** The writer's row of a read-write key (store: `WRITER_ROW_SLOT`); readers' rows are the slots above it. */
const WRITER_ROW = 1;

export type ReadWriteInvariant =
  | 'read-write: a writer overlaps no other holder'
  | "read-write: a writer's token above every earlier grant"
  | 'read-write: no fenced write beside a writer';

export const isReadWriteKey = (key: string): boolean => key.startsWith(RW_PREFIX);

/** The history target of a read-write lease's fenced writes. */
export const rwTarget = (key: string, fencingToken: bigint | string): string => `${key}@${fencingToken}`;

/** The key and token of a read-write lease's history target; undefined for any other target. */
export function parseRwTarget(target: string): { key: string; token: bigint } | undefined {
  const at = target.lastIndexOf('@');
  if (at < 0 || !isReadWriteKey(target)) return undefined;
  return { key: target.slice(0, at), token: BigInt(target.slice(at + 1)) };
}

/** A lease event of a read-write key (`sched_lease_event`), database clock in ms. */
export interface ReadWriteEvent {
  seq: bigint;
  kind: 'grant' | 'release' | 'renew';
  key: string;
  slot: number;
  token: bigint;
  oldToken: bigint | null;
  owner: string | null;
  app: string;
  at: number;
}

/** A committed fenced write of a read-write lease (`fault_history`), database clock in ms. */
export interface ReadWriteWrite {
  target: string;
  worker: string;
  seq: string;
  at: number;
}

export interface ReadWriteFigures {
  works: { shared: number; exclusive: number };
  /** Grants the server logged on read-write keys: readers' and writers'. */
  grants: { shared: number; exclusive: number };
  /** Fenced writes of read-write leases judged against the writers' holds. */
  writesJudged: number;
}

/**
 * Per key, the works whose held windows overlap where one of them is a writer's (the runner's probe calls it too).
 * A work never seen held has no window.
 */
export function readWriteOverlaps(log: ReadonlyArray<Received<ScheduleMessage>>): string[] {
  type Window = { worker: string; mode: 'shared' | 'exclusive'; token: string; from: number; to: number };
  const windows = new Map<string, Window[]>();
  for (const { worker, msg } of log) {
    if (msg.t !== 'rw' || msg.lastHeldAt === undefined) continue;
    const window = { worker, mode: msg.mode, token: msg.fencingToken, from: msg.startedAt, to: msg.lastHeldAt };
    (windows.get(msg.key) ?? windows.set(msg.key, []).get(msg.key)!).push(window);
  }
  const found: string[] = [];
  const name = (w: Window) => `${w.worker}'s ${w.mode === 'shared' ? 'reader' : 'writer'} (token ${w.token})`;
  for (const [key, list] of windows) {
    list.sort((a, b) => a.from - b.from);
    let open: Window[] = [];
    for (const window of list) {
      open = open.filter((o) => o.to > window.from);
      for (const o of open) {
        if (o.mode === 'shared' && window.mode === 'shared') continue;
        found.push(
          `${key}: ${name(window)} began ${Math.round(o.to - window.from)} ms before ${name(o)} last saw its lease held`,
        );
      }
      open.push(window);
    }
  }
  return found;
}

export function checkReadWrite(
  log: ReadonlyArray<Received<ScheduleMessage>>,
  events: readonly ReadWriteEvent[],
  writes: readonly ReadWriteWrite[],
): { violations: Array<{ invariant: ReadWriteInvariant; detail: string }>; figures: ReadWriteFigures } {
  const violations: Array<{ invariant: ReadWriteInvariant; detail: string }> = [];
  const flag = (invariant: ReadWriteInvariant, detail: string) => violations.push({ invariant, detail });
  for (const detail of readWriteOverlaps(log)) flag('read-write: a writer overlaps no other holder', detail);

  const figures: ReadWriteFigures = {
    works: { shared: 0, exclusive: 0 },
    grants: { shared: 0, exclusive: 0 },
    writesJudged: 0,
  };
  for (const { msg } of log) if (msg.t === 'rw') figures.works[msg.mode]++;

  // Per key in the server's order: the tokens, and each writer's hold (grant → release, next grant, or cleared).
  const top = new Map<string, { token: bigint; seq: bigint }>();
  const lastWriter = new Map<string, { token: bigint; seq: bigint }>();
  const holds = new Map<string, Array<{ token: bigint; owner: string; from: number; to: number }>>();
  const open = new Map<string, { token: bigint; owner: string; from: number; to: number }>();
  for (const e of events) {
    if (!isReadWriteKey(e.key)) continue;
    const writer = e.slot === WRITER_ROW;
    if (e.kind === 'grant') {
      figures.grants[writer ? 'exclusive' : 'shared']++;
      const above = writer ? top.get(e.key) : lastWriter.get(e.key);
      if (above && e.token <= above.token) {
        flag(
          "read-write: a writer's token above every earlier grant",
          `${e.key}: ${writer ? 'a writer' : 'a reader'} was granted token ${e.token} (${e.owner}, #${e.seq}) after ${writer ? 'token' : "the writer's token"} ${above.token} (#${above.seq})`,
        );
      }
      if (!top.has(e.key) || e.token > top.get(e.key)!.token) top.set(e.key, { token: e.token, seq: e.seq });
      if (!writer) continue;
      lastWriter.set(e.key, { token: e.token, seq: e.seq });
      const before = open.get(e.key);
      if (before) before.to = e.at;
      const hold = { token: e.token, owner: e.owner ?? '?', from: e.at, to: Infinity };
      open.set(e.key, hold);
      (holds.get(e.key) ?? holds.set(e.key, []).get(e.key)!).push(hold);
    } else if (e.kind === 'release' && writer && open.get(e.key)?.token === e.oldToken) {
      open.get(e.key)!.to = e.at;
      open.delete(e.key);
    }
  }

  // No other lease's fenced write inside a writer's hold (a write and the hold's bounds are ordered by row locks).
  for (const write of writes) {
    const of = parseRwTarget(write.target);
    if (!of) continue;
    figures.writesJudged++;
    const hold = (holds.get(of.key) ?? []).find((h) => h.token !== of.token && h.from < write.at && write.at < h.to);
    if (hold) {
      flag(
        'read-write: no fenced write beside a writer',
        `${of.key}: write #${write.seq} of token ${of.token} (${write.worker}) committed ${Math.round(write.at - hold.from)} ms into the hold of writer ${hold.owner} (token ${hold.token})`,
      );
    }
  }
  return { violations, figures };
}
