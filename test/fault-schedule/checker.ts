/**
 * The schedule's history checker: the guarantees of docs/guarantees.md, judged from the database's own history (the fault suite's
 * fenced-write history plus the lease events of instrumentation.ts) and the workers' reports. Invariants:
 *
 * - **fenced exclusion** — the fault suite's checker (`../faults/support/checker.ts`): per key in commit order no
 *   older token's write after a newer one's, one writer per token, counters equal to the writes (no lost update),
 *   refused writes absent, no write committed after its holder saw the lease lost; and, from the lease events, no
 *   fenced write committed after its own lease was released or a newer lease of the key was granted (both are ordered
 *   by the row lock, so the database clock orders them);
 * - **nothing lost** — every write a worker was told committed is in the history;
 * - **tokens rising per key** — per key, every grant (in the order the row lock serialised them) carries a larger
 *   token than every earlier grant; no token granted twice; every grant a worker was told of is one the server made,
 *   to that worker;
 * - **no stale hands** — no renewal or release of a lease row made by another process than the row's holder, and no
 *   renewal of a row that had already expired when the renewal began (it must find it expired and leave it free);
 * - **waits settle within their bound** — every call that waited settled (granted, timed out, aborted, refused)
 *   within the smaller of its wait timeout and its abort delay, plus the second for a statement in flight (docs/waiting.md),
 *   plus LOAD_ALLOWANCE_MS, plus the time its own process was SIGSTOPped meanwhile;
 * - **priority order** — a grant never passes a waiter row that was live when the grant's statement began (renewed
 *   and landed long enough before it to be in its snapshot, still live well after it) of a higher priority, or of
 *   the same priority and an earlier place (a newcomer comes after every queued waiter).
 *
 * The modes where two features meet are judged in `checker-modes.ts` (called from here): **sticky: one call at a
 * time**, **join: the run it waited for**, **join: refused on a drained key** and **local safety**; the read-write
 * keys (`RW_PREFIX`, many holders at once: left out of the per-key checks above where they assume one holder) in
 * `checker-read-write.ts`.
 *
 * The runner adds two more, which it checks itself: **close leaves nothing** (after `close()` while calls run) and
 * **settled: nothing left** (after everything is closed and killed rows have expired: no live lease row, no live
 * waiter row, no server connection).
 */
import type pg from 'pg';
import { check } from '../faults/support/checker.js';
import { LEASE, type Received } from '../faults/support/harness.js';
import type { WorkerMessage as FaultWorkerMessage } from '../faults/support/protocol.js';
import { checkLengths, lengthEventOf, type LengthFigures, type LengthInvariant } from './checker-length.js';
import { checkModes, type ModesContext, type ModesFigures, type ModesInvariant } from './checker-modes.js';
import {
  checkReadWrite,
  isReadWriteKey,
  type ReadWriteFigures,
  type ReadWriteInvariant,
} from './checker-read-write.js';
import type { ScheduleMessage } from './protocol.js';

export type Invariant =
  | 'fenced exclusion'
  | 'nothing lost'
  | 'tokens rising per key'
  | 'no stale hands'
  | 'waits settle within their bound'
  | 'priority order'
  | 'close leaves nothing'
  | 'settled: nothing left'
  | ModesInvariant
  | ReadWriteInvariant
  | LengthInvariant;

export const INVARIANTS: readonly Invariant[] = [
  'fenced exclusion',
  'nothing lost',
  'tokens rising per key',
  'no stale hands',
  'waits settle within their bound',
  'priority order',
  'close leaves nothing',
  'settled: nothing left',
  'sticky: one call at a time',
  'join: the run it waited for',
  'join: refused on a drained key',
  'local safety',
  'multi-key: no two holders overlap on a key',
  'read-write: a writer overlaps no other holder',
  "read-write: a writer's token above every earlier grant",
  'read-write: no fenced write beside a writer',
  'lease length: each lease its own',
  'lease length: no takeover before it ran out',
];

export interface Violation {
  invariant: Invariant;
  detail: string;
  step?: number;
  /** Set by the runner when the violation is a known library defect (regressions.json) not yet fixed. */
  known?: string;
}

/** What the run did, for the summary table. */
export interface Figures {
  /** API calls made (a batch of n acquisitions counts n, a release 1 per lease). */
  operations: number;
  calls: Record<string, number>;
  grants: number;
  releases: number;
  lost: number;
  writes: { committed: number; refused: number; unknown: number };
  /** `worst`: the three waits that overshot their bound most (whether or not past the allowance). */
  waits: { total: number; byOutcome: Record<string, number>; maxOvershootMs: number; worst: string[] };
  /** Grants that had a waiter row the priority rule could judge them against. */
  priorityGrantsJudged: number;
  /**
   * Grants no worker was told of: a statement that committed after its caller gave up on it (the row expires by
   * itself, as docs/join.md says), or a worker killed before it could report. Counted, not judged.
   */
  unreportedGrants: number;
  /** Event-loop stalls of 250 ms or more in the workers (SIGSTOPs included), and the longest. */
  stalls: { count: number; maxMs: number };
  /** Sticky calls that ran, joins by outcome, and grants handed over by a release (and confirmed by their owner). */
  modes: ModesFigures & { handoffs: number; confirmed: number };
  readWrite: ReadWriteFigures;
  length: LengthFigures;
}

/** Above the bound of docs/waiting.md (waitTimeoutMs + 1 s for a statement in flight): a loaded machine's event loop. */
export const LOAD_ALLOWANCE_MS = 1_000;
const STATEMENT_IN_FLIGHT_MS = 1_000;
/** The workers' module lease length: a lease whose call asked none has it. */
const moduleLeaseMs = LEASE.timing!.leaseTimeoutMs!;
/** A waiter row counts as seen by a grant only if it landed and was last renewed this long before the statement. */
const VISIBLE_MARGIN_MS = 300;
/** … and as live only if it still lived this long after the statement began (its check runs a little later). */
const LIVE_MARGIN_MS = 300;
/** How far back a grantee's evicted waiter row counts as its place: the longest wait of the workload, and then some. */
const EVICTION_WINDOW_US = 5_000_000n;

interface LeaseEventRow {
  seq: string;
  kind: 'grant' | 'release' | 'renew';
  target_id: string;
  fencing_token: string;
  owner: string | null;
  priority: number | null;
  app: string;
  txid: string;
  at_us: string;
  /** When the event's transaction committed (visible to others from then on). */
  committed_us: string;
  old_owner: string | null;
  old_fencing_token: string | null;
  old_expired_ms: number | null;
  old_held: boolean | null;
  slot: number;
  lease_ms: number | null;
  old_lease_ms: number | null;
  old_left_ms: number | null;
  handed: boolean;
  waiters: Array<{
    id: string;
    owner: string;
    priority: number;
    seq: string;
    /** How long the row still lived after the grant's write. */
    liveMs: number;
    renewedMs: number;
    landedMs: number | null;
  }> | null;
}

const isFaultMessage = (
  r: Received<ScheduleMessage>,
): r is Received<Extract<FaultWorkerMessage, { t: 'write' | 'lost' }>> => r.msg.t === 'write' || r.msg.t === 'lost';

export async function checkRun(
  admin: pg.Client,
  log: ReadonlyArray<Received<ScheduleMessage>>,
  pauses: ReadonlyMap<string, ReadonlyArray<readonly [number, number]>>,
  context: ModesContext = { drains: [], readyAt: new Map() },
): Promise<{ violations: Violation[]; figures: Figures }> {
  const violations: Violation[] = [];
  const flag = (invariant: Invariant, detail: string) => violations.push({ invariant, detail });

  // Fenced exclusion and nothing lost, as the fault suite judges them.
  const faults = await check(admin, log.filter(isFaultMessage));
  for (const detail of faults.violations)
    flag(/is missing$/.test(detail) ? 'nothing lost' : 'fenced exclusion', detail);

  const events = (
    await admin.query<LeaseEventRow>(`
      SELECT seq::text, kind, target_id, fencing_token::text, owner, priority, app, txid::text,
        (extract(epoch FROM at) * 1000000)::bigint::text AS at_us,
        (extract(epoch FROM coalesce(committed_at, at)) * 1000000)::bigint::text AS committed_us, old_owner, old_fencing_token::text, old_expired_ms,
        waiters, old_held, slot, lease_ms, old_lease_ms, old_left_ms,
        -- a grant handed over to a waiter (by its own process too): its waiter row went in the same transaction
        EXISTS (SELECT 1 FROM sched_waiter_gone g WHERE g.txid = e.txid AND g.waiter_id = e.lease_token) AS handed
      FROM sched_lease_event e ORDER BY e.seq`)
  ).rows;
  const grants = events.filter((e) => e.kind === 'grant');

  // Tokens rising per key, in grant order (read-write keys: checker-read-write.ts); one grant per token; the workers'
  // grants are the server's.
  const top = new Map<string, bigint>();
  const granted = new Map<string, LeaseEventRow>();
  for (const grant of grants) {
    const token = BigInt(grant.fencing_token);
    const before = top.get(grant.target_id);
    if (before !== undefined && token <= before && !isReadWriteKey(grant.target_id)) {
      flag(
        'tokens rising per key',
        `${grant.target_id}: token ${token} granted to ${grant.owner} (#${grant.seq}) after token ${before}`,
      );
    }
    if (before === undefined || token > before) top.set(grant.target_id, token);
    const twice = granted.get(grant.fencing_token);
    if (twice) flag('tokens rising per key', `token ${token} granted twice: ${twice.target_id} and ${grant.target_id}`);
    granted.set(grant.fencing_token, grant);
  }
  const reported = new Set<string>();
  for (const { worker, msg } of log) {
    if (msg.t !== 'grant') continue;
    reported.add(msg.fencingToken);
    const server = granted.get(msg.fencingToken);
    if (!server || server.target_id !== msg.key || server.owner !== worker) {
      flag(
        'tokens rising per key',
        `${worker} was granted ${msg.key} with token ${msg.fencingToken}, which the server granted ${server ? `on ${server.target_id} to ${server.owner}` : 'never'}`,
      );
    }
  }

  // No fenced write after its lease was released or superseded (lock-ordered, so the database clock orders them).
  const history = (
    await admin.query<{ target: string; fencing_token: string; worker: string; seq: string; at_us: string }>(`
      SELECT target, fencing_token::text, worker, commit_seq::text AS seq,
        (extract(epoch FROM at) * 1000000)::bigint::text AS at_us
      FROM fault_history ORDER BY at`)
  ).rows;
  // One sweep per key over its grants, releases and writes in database-clock order (not a read-write key's: its
  // readers hold at once; their writes have targets of their own, judged by checker-read-write.ts).
  const timeline = new Map<string, Array<{ at: bigint; token: bigint; what: 'grant' | 'release' | number }>>();
  const entriesOf = (key: string) => timeline.get(key) ?? timeline.set(key, []).get(key)!;
  for (const e of events) {
    if (e.kind === 'grant')
      entriesOf(e.target_id).push({ at: BigInt(e.at_us), token: BigInt(e.fencing_token), what: 'grant' });
    if (e.kind === 'release') {
      entriesOf(e.target_id).push({ at: BigInt(e.at_us), token: BigInt(e.old_fencing_token!), what: 'release' });
    }
  }
  history.forEach((write, index) =>
    entriesOf(write.target).push({ at: BigInt(write.at_us), token: BigInt(write.fencing_token), what: index }),
  );
  for (const [key, entries] of timeline) {
    if (isReadWriteKey(key)) continue;
    // Writes first at equal times (the benefit of the doubt: a write and the end of its lease are lock-ordered).
    const rank = (what: 'grant' | 'release' | number) => (typeof what === 'number' ? 0 : 1);
    entries.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : rank(a.what) - rank(b.what)));
    let newest = -1n;
    const released = new Set<bigint>();
    for (const entry of entries) {
      if (entry.what === 'grant') newest = entry.token > newest ? entry.token : newest;
      else if (entry.what === 'release') released.add(entry.token);
      else if (newest > entry.token || released.has(entry.token)) {
        const write = history[entry.what];
        flag(
          'fenced exclusion',
          `${key}: write #${write.seq} of token ${entry.token} (${write.worker}) committed after ${released.has(entry.token) ? 'that lease was released' : `token ${newest} was granted`}`,
        );
      }
    }
  }

  // No stale hands: every logged renewal is suspect by construction (see instrumentation.ts); releases by others.
  for (const e of events) {
    if (e.kind === 'renew') {
      if (e.app !== e.old_owner) {
        flag('no stale hands', `${e.target_id}: ${e.old_owner}'s lease (token ${e.fencing_token}) renewed by ${e.app}`);
      }
      if ((e.old_expired_ms ?? 0) > 1) {
        flag(
          'no stale hands',
          `${e.target_id}: ${e.app} renewed its lease (token ${e.fencing_token}) ${Math.round(e.old_expired_ms!)} ms after it had expired`,
        );
      }
    } else if (e.kind === 'release' && e.app !== e.old_owner && !isReadWriteKey(e.target_id)) {
      // A read-write key's rows are cleared by others by design: a writer's grant clears expired readers' tokens, a
      // reader's grant a dead writer's (docs/read-write.md); its checks judge them (checker-read-write.ts).
      flag(
        'no stale hands',
        `${e.target_id}: ${e.old_owner}'s lease (token ${e.old_fencing_token}) released by ${e.app}`,
      );
    }
  }

  // Waits settle within their bound.
  const waits: Figures['waits'] = { total: 0, byOutcome: {}, maxOvershootMs: 0, worst: [] };
  const overshoots: Array<{ ms: number; what: string }> = [];
  const calls: Record<string, number> = {};
  let operations = 0;
  for (const { worker, msg } of log) {
    if (msg.t !== 'op') continue;
    const n = msg.calls ?? 1;
    operations += n;
    calls[msg.op] = (calls[msg.op] ?? 0) + n;
    if (!msg.wait) continue;
    const { startedAt, endedAt, boundMs, key, priority, stalledMs } = msg.wait;
    waits.total++;
    waits.byOutcome[msg.outcome] = (waits.byOutcome[msg.outcome] ?? 0) + 1;
    // The time the process could not run: its SIGSTOPs (the runner's clock) or its event loop's lateness (its own),
    // which counts the SIGSTOPs too; the larger.
    const stopped = (pauses.get(worker) ?? []).reduce(
      (sum, [from, to]) => sum + Math.max(0, Math.min(to, endedAt) - Math.max(from, startedAt)),
      0,
    );
    const paused = Math.max(stopped, stalledMs);
    const overshoot = endedAt - startedAt - paused - boundMs;
    waits.maxOvershootMs = Math.max(waits.maxOvershootMs, overshoot);
    const what = `${worker}: ${msg.op} of ${key} (priority ${priority}, bound ${boundMs} ms) ended '${msg.outcome}' after ${Math.round(endedAt - startedAt)} ms${paused ? ` (${Math.round(paused)} ms of it unable to run)` : ''}${msg.error ? `: ${msg.error.slice(0, 120)}` : ''}`;
    overshoots.push({ ms: overshoot, what });
    if (overshoot > STATEMENT_IN_FLIGHT_MS + LOAD_ALLOWANCE_MS) flag('waits settle within their bound', what);
  }

  waits.worst = overshoots
    .sort((a, b) => b.ms - a.ms)
    .slice(0, 3)
    .map((o) => `+${Math.round(o.ms)} ms: ${o.what}`);

  // Priority order among live waiters.
  const gone = (
    await admin.query<{
      txid: string;
      target_id: string;
      owner: string;
      priority: number;
      seq: string;
      app: string;
      at_us: string;
    }>(`SELECT txid::text, target_id, owner, priority, seq::text, app,
          (extract(epoch FROM at) * 1000000)::bigint::text AS at_us FROM sched_waiter_gone`)
  ).rows;
  const goneIn = new Map<string, typeof gone>();
  const goneOf = new Map<string, typeof gone>();
  for (const row of gone) {
    (goneIn.get(row.txid) ?? goneIn.set(row.txid, []).get(row.txid)!).push(row);
    const key = `${row.target_id}\u0000${row.owner}`;
    (goneOf.get(key) ?? goneOf.set(key, []).get(key)!).push(row);
  }
  const grantTx = new Map(grants.map((g) => [g.txid, g]));
  let judged = 0;
  for (const grant of grants) {
    const waiting = (grant.waiters ?? []).filter(
      (w) =>
        w.liveMs > LIVE_MARGIN_MS &&
        w.renewedMs > VISIBLE_MARGIN_MS &&
        w.landedMs !== null &&
        w.landedMs > VISIBLE_MARGIN_MS,
    );
    if (!waiting.length) continue;
    judged++;
    // The grantee's own row, deleted by the grant's transaction. None: a newcomer, behind every queued waiter —
    // unless a row of the grantee's process for this key and priority was deleted in the 5 s before. Either another
    // process removed it as dead (its heartbeat late) and the waiter attempted at its old place before it noticed
    // and re-queued (docs/waiting.md: a waiter keeps its place across an eviction); or the wait gave up and removed
    // its row while an attempt it had sent, carrying its place, was still on its way (a grant after the caller gave
    // up is released at once). Its place is then the earliest such row's: the benefit of the doubt.
    const own = (goneIn.get(grant.txid) ?? []).filter(
      (row) => row.target_id === grant.target_id && row.owner === grant.owner && row.priority === grant.priority,
    );
    const at = BigInt(grant.at_us);
    const recent = (goneOf.get(`${grant.target_id}\u0000${grant.owner}`) ?? []).filter(
      (row) => BigInt(row.at_us) < at && at - BigInt(row.at_us) < EVICTION_WINDOW_US && row.txid !== grant.txid,
    );
    const evicted = recent.filter((row) => row.priority === grant.priority);
    const seqs = (own.length ? own : evicted).map((row) => BigInt(row.seq));
    const place = seqs.length ? seqs.reduce((a, b) => (a < b ? a : b)) : undefined;
    const as = own.length
      ? `place ${place}`
      : evicted.length
        ? `a waiter whose row just went, place ${place}`
        : 'a newcomer';
    for (const w of waiting) {
      const ahead =
        w.priority > grant.priority! ||
        (w.priority === grant.priority && (place === undefined || BigInt(w.seq) < place));
      if (ahead) {
        const before = recent.map(
          (row) =>
            `place ${row.seq} priority ${row.priority} removed by ${row.app}${grantTx.has(row.txid) ? ` (in grant #${grantTx.get(row.txid)!.seq} to ${grantTx.get(row.txid)!.owner})` : ''} ${Math.round(Number(at - BigInt(row.at_us)) / 1000)} ms before`,
        );
        flag(
          'priority order',
          `${grant.target_id}: granted to ${grant.owner} (priority ${grant.priority}, ${as}, #${grant.seq}) past live waiter ${w.owner} (priority ${w.priority}, place ${w.seq}, renewed ${Math.round(w.renewedMs)} ms before, landed ${Math.round(w.landedMs!)} ms before, live ${Math.round(w.liveMs)} ms after the write); the grantee's rows of the key gone in the ${EVICTION_WINDOW_US / 1_000_000n} s before: ${before.join(', ') || 'none'}`,
        );
      }
    }
  }

  // The modes where two features meet: sticky calls, joins (and drains), local safety.
  const modes = checkModes(
    log,
    events.map((e) => ({
      seq: BigInt(e.seq),
      kind: e.kind,
      key: e.target_id,
      token: BigInt(e.fencing_token),
      owner: e.owner,
      oldToken: e.old_fencing_token === null ? null : BigInt(e.old_fencing_token),
      oldOwner: e.old_owner,
      oldHeld: e.old_held,
      app: e.app,
      at: Number(BigInt(e.at_us)) / 1000,
      committedAt: Number(BigInt(e.committed_us)) / 1000,
    })),
    context,
    pauses,
  );
  for (const v of modes.violations) flag(v.invariant, v.detail);
  const readWrite = checkReadWrite(
    log,
    events.map((e) => ({
      seq: BigInt(e.seq),
      kind: e.kind,
      key: e.target_id,
      slot: e.slot,
      token: BigInt(e.fencing_token),
      oldToken: e.old_fencing_token === null ? null : BigInt(e.old_fencing_token),
      owner: e.owner,
      app: e.app,
      at: Number(BigInt(e.at_us)) / 1000,
    })),
    history.map((w) => ({ target: w.target, worker: w.worker, seq: w.seq, at: Number(BigInt(w.at_us)) / 1000 })),
  );
  for (const v of readWrite.violations) flag(v.invariant, v.detail);
  const lengths = checkLengths(log, events.map(lengthEventOf), moduleLeaseMs);
  for (const v of lengths.violations) flag(v.invariant, v.detail);
  const { rows: handed } = await admin.query<{ handoffs: number; confirmed: number }>(
    `SELECT count(*)::int AS handoffs, count(confirmed_at)::int AS confirmed FROM sched_handoff`,
  );

  const figures: Figures = {
    operations,
    calls,
    grants: grants.length,
    releases: events.filter((e) => e.kind === 'release').length,
    lost: faults.lostEvents,
    writes: {
      committed: faults.writes,
      refused: faults.refused,
      unknown: faults.unknown.committed + faults.unknown.notCommitted,
    },
    waits,
    priorityGrantsJudged: judged,
    unreportedGrants: grants.filter((g) => !reported.has(g.fencing_token)).length,
    stalls: log.reduce(
      (acc, { msg }) => (msg.t === 'stall' ? { count: acc.count + 1, maxMs: Math.max(acc.maxMs, msg.ms) } : acc),
      { count: 0, maxMs: 0 },
    ),
    modes: { ...modes.figures, ...handed[0] },
    readWrite: readWrite.figures,
    length: lengths.figures,
  };
  return { violations, figures };
}
