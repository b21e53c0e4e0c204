/**
 * The checks of a lease length per call (docs/configuration.md, "A lease length per call") in the fault schedule, on
 * the server's own history (`sched_lease_event`, instrumentation.ts: every grant, and every renewal that changed a
 * row's `lease_timeout_ms`, with the row's length before and after and how long the old row still had to live):
 *
 * - **lease length: each lease its own** — a lease's row carries the length its call asked (`length` reports; a call
 *   that asked none, the module's): every grant an acquisition made (a grant a release handed to a waiter carries
 *   the waiter's timeout until its owner confirms it), and every write that changed the length (a renewal, or that
 *   confirmation), left the row with it. One lease's length never becomes another's (the heartbeat renews every
 *   lease of a process in one statement);
 * - **lease length: no takeover before it ran out** — a grant by another process replaced a held row only once the
 *   row's own length had run out since its last renewal (database clock, at the grant's write). Together with the
 *   first, a takeover waits for the length the replaced lease's call asked.
 *
 * Local safety (checker-modes.ts) judges the holder's side: it gave the lease up before anyone took it over.
 */
import type pg from 'pg';
import type { Received } from '../faults/support/harness.js';
import type { ScheduleMessage } from './protocol.js';

export type LengthInvariant = 'lease length: each lease its own' | 'lease length: no takeover before it ran out';

/** A lease event (`sched_lease_event`) with the row's lengths; database clock in ms. */
export interface LengthEvent {
  seq: bigint;
  kind: 'grant' | 'release' | 'renew';
  key: string;
  token: bigint;
  owner: string | null;
  app: string;
  oldOwner: string | null;
  oldHeld: boolean | null;
  /** The row's lease length after the write, and before it (an update). */
  leaseMs: number | null;
  oldLeaseMs: number | null;
  /** How long the old row still had to live by its own length at the write (positive: it was live). */
  oldLeftMs: number | null;
  /** A grant handed over to a waiter by a release (its process's own, too): it carries the waiter's timeout. */
  handed: boolean;
  /** When it was written (database clock, ms). */
  at: number;
}

/**
 * A grant its call never worked with (its wait ended, its process was stopped) has no `length` report: a write of
 * its process that gave its key a length that a call of that process on that key asked, while that call ran (the
 * database's clock against the process's, one machine: a second either side, and a statement in flight after the
 * call ended), is that call's.
 */
const CALL_SLACK_MS = 1_000;
const IN_FLIGHT_MS = 2_000;

export interface LengthFigures {
  /** Leases whose call asked a length of its own (`length` reports), by length. */
  asked: Record<string, number>;
  /** Writes that changed a row's length, judged against the length its lease asked. */
  changesJudged: number;
  /** Takeovers (a held row granted to another process) judged against the old row's own length. */
  takeovers: number;
  /** Of those, takeovers of a lease whose call asked its own length. */
  takeoversOfOwnLength: number;
}

export function checkLengths(
  log: ReadonlyArray<Received<ScheduleMessage>>,
  events: readonly LengthEvent[],
  moduleLeaseMs: number,
): { violations: Array<{ invariant: LengthInvariant; detail: string }>; figures: LengthFigures } {
  const violations: Array<{ invariant: LengthInvariant; detail: string }> = [];
  const flag = (invariant: LengthInvariant, detail: string) => violations.push({ invariant, detail });
  const asked = new Map<bigint, number>();
  const figures: LengthFigures = { asked: {}, changesJudged: 0, takeovers: 0, takeoversOfOwnLength: 0 };
  for (const { msg } of log) {
    if (msg.t !== 'length') continue;
    asked.set(BigInt(msg.fencingToken), msg.leaseTimeoutMs);
    figures.asked[msg.leaseTimeoutMs] = (figures.asked[msg.leaseTimeoutMs] ?? 0) + 1;
  }
  const calls = new Map<string, { worker: string; key: string; leaseTimeoutMs: number; from: number; to: number }>();
  for (const { worker, msg } of log) {
    if (msg.t !== 'length-call') continue;
    const to = msg.endedAt === undefined ? Infinity : msg.endedAt + IN_FLIGHT_MS + CALL_SLACK_MS;
    calls.set(`${worker}/${msg.id}`, {
      worker,
      key: msg.key,
      leaseTimeoutMs: msg.leaseTimeoutMs,
      from: msg.startedAt - CALL_SLACK_MS,
      to,
    });
  }
  const callAsked = (e: LengthEvent) =>
    [...calls.values()].some(
      (c) => c.worker === e.app && c.key === e.key && c.leaseTimeoutMs === e.leaseMs && c.from <= e.at && e.at <= c.to,
    );
  const lengthOf = (token: bigint) => asked.get(token) ?? moduleLeaseMs;

  for (const e of events) {
    if (e.leaseMs === null) continue;
    // An acquisition's grant writes its call's length; a grant handed over by a release (of its own process too)
    // carries its waiter's timeout until the owner confirms it (a write that changes the length: judged here too).
    const ownGrant = e.kind === 'grant' && e.app === e.owner && !e.handed;
    const change = e.kind === 'renew' && e.oldLeaseMs !== e.leaseMs;
    if (!ownGrant && !change) continue;
    if (change) figures.changesJudged++;
    const wanted = lengthOf(e.token);
    if (e.leaseMs !== wanted && !(asked.get(e.token) === undefined && callAsked(e))) {
      const what = ownGrant ? `granted to ${e.owner}` : `written by ${e.app} (a renewal or a confirmation)`;
      flag(
        'lease length: each lease its own',
        `${e.key}: the row of token ${e.token} (#${e.seq}) ${what} with a length of ${e.leaseMs} ms, not the ${wanted} ms its call asked${change ? ` (it had ${e.oldLeaseMs} ms)` : ''}`,
      );
    }
  }

  for (const e of events) {
    if (e.kind !== 'grant' || !e.oldHeld || e.app === e.oldOwner || e.oldLeftMs === null) continue;
    figures.takeovers++;
    if (e.oldLeaseMs !== null && e.oldLeaseMs !== moduleLeaseMs) figures.takeoversOfOwnLength++;
    // The grant's statement found the row expired by the clock before this write: a live row here is a takeover
    // before the row's length ran out (1 ms: the two readings' rounding).
    if (e.oldLeftMs > 1) {
      flag(
        'lease length: no takeover before it ran out',
        `${e.key}: granted to ${e.app} (token ${e.token}, #${e.seq}) while ${e.oldOwner}'s lease (a length of ${e.oldLeaseMs} ms) still had ${Math.round(e.oldLeftMs)} ms to live`,
      );
    }
  }
  return { violations, figures };
}

/** A row of `sched_lease_event` as the checks read it (`handed`: computed by the full check's query). */
export interface LengthEventRow {
  seq: string;
  kind: 'grant' | 'release' | 'renew';
  target_id: string;
  fencing_token: string;
  owner: string | null;
  app: string;
  old_owner: string | null;
  old_held: boolean | null;
  lease_ms: number | null;
  old_lease_ms: number | null;
  old_left_ms: number | null;
  at_us: string;
  handed?: boolean;
}

export const lengthEventOf = (e: LengthEventRow): LengthEvent => ({
  seq: BigInt(e.seq),
  kind: e.kind,
  key: e.target_id,
  token: BigInt(e.fencing_token),
  owner: e.owner,
  app: e.app,
  oldOwner: e.old_owner,
  oldHeld: e.old_held,
  leaseMs: e.lease_ms,
  oldLeaseMs: e.old_lease_ms,
  oldLeftMs: e.old_left_ms,
  handed: e.handed ?? false,
  at: Number(BigInt(e.at_us)) / 1000,
});

/**
 * The runner's probe after each step: the same checks on the writes that changed a row's length and on the takeovers
 * of a row that was still live (the only events either check can flag, but a grant's own length: the full check).
 */
export async function probeLengths(
  admin: pg.Client,
  log: ReadonlyArray<Received<ScheduleMessage>>,
  moduleLeaseMs: number,
): Promise<string[]> {
  const { rows } = await admin.query<LengthEventRow>(`
    SELECT seq::text, kind, target_id, fencing_token::text, owner, app, old_owner, old_held, lease_ms, old_lease_ms,
      old_left_ms, (extract(epoch FROM at) * 1000000)::bigint::text AS at_us
    FROM sched_lease_event
    WHERE (kind = 'renew' AND lease_ms IS DISTINCT FROM old_lease_ms)
      OR (kind = 'grant' AND old_held AND app IS DISTINCT FROM old_owner AND old_left_ms > 1)
    ORDER BY seq`);
  const events = rows.map(lengthEventOf);
  return checkLengths(log, events, moduleLeaseMs).violations.map((v) => `${v.invariant}: ${v.detail}`);
}
