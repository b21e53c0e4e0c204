/**
 * The checks of the modes where two features meet (issue 38), beside `checker.ts`, on the same history:
 *
 * - **sticky: one call at a time** — per process, no sticky call began before the one before it had ended (the calls
 *   that ran, from the worker's `sticky` reports, on its own clock). Across processes the term's fenced writes are
 *   judged by the fenced-exclusion checks like every lease's;
 * - **join: the run it waited for** — a join settles with the outcome of a run that held the key while it waited: the
 *   fencing token it reports was granted on that key before the join ended, and that run ended (released, or the key
 *   granted to the next: when that write committed) after the join began (system clock against the database's,
 *   within JOIN_CLOCK_SLACK_MS);
 * - **join: refused on a drained key** — a join that began once the drain had reached its process (the drain's
 *   commit, or the process's start if later, plus the 1 s refresh of docs/console.md, a statement in flight, LOAD_ALLOWANCE_MS
 *   and the time the process could not run meanwhile) and ended before the undrain was asked settled with
 *   `LeaseDrainedError` (or with shutdown): never with a value, another run's failure, or a wait;
 * - **local safety** — no other process was granted a key while its holder still saw `isHeld()` true: a takeover's
 *   grant (database clock) comes after the last time the holder's sampler saw the replaced lease held (docs/guarantees.md,
 *   4: the holder's local deadline passes before anyone may take over).
 */
import type { Received } from '../faults/support/harness.js';
import type { ScheduleMessage } from './protocol.js';

/** Clock reading error allowed between a worker's `Date.now()` and the database's `clock_timestamp()` (one host). */
export const JOIN_CLOCK_SLACK_MS = 100;
/** The bound (docs/console.md) on a drain reaching another process: its 1 s refresh plus a statement in flight. */
const DRAIN_REACH_MS = 1_000 + 1_000;
const LOAD_ALLOWANCE_MS = 1_000;

export type ModesInvariant =
  | 'sticky: one call at a time'
  | 'join: the run it waited for'
  | 'join: refused on a drained key'
  | 'local safety'
  | 'multi-key: no two holders overlap on a key';

/** A drain the runner made: when it committed, and when its undrain was asked (system clock, ms). */
export interface DrainWindow {
  key: string;
  from: number;
  to: number;
}

/** What the runner knows beside the log: its drains, each incarnation's start, its SIGSTOPs (system clock, ms). */
export interface ModesContext {
  drains: readonly DrainWindow[];
  readyAt: ReadonlyMap<string, number>;
}

/** The lease events of the history (`sched_lease_event`) these checks read; times in ms of the database clock. */
export interface ModesEvent {
  seq: bigint;
  kind: 'grant' | 'release' | 'renew';
  key: string;
  token: bigint;
  /** The grant's owner. */
  owner: string | null;
  oldToken: bigint | null;
  oldOwner: string | null;
  oldHeld: boolean | null;
  app: string;
  at: number;
  /** When its transaction committed: other sessions saw the row as it was before until then. */
  committedAt: number;
}

export interface ModesFigures {
  stickyCalls: number;
  joins: Record<string, number>;
  /** What the checks had to judge: joins with a run's token, joins inside a drain, takeovers with a holder's samples. */
  judged: { joinRuns: number; joinsDrained: number; takeovers: number };
}

/** Per process, sticky calls that began before the previous one had ended (the runner's probe calls it too). */
export function stickyOverlaps(log: ReadonlyArray<Received<ScheduleMessage>>): string[] {
  const calls = new Map<string, Array<Extract<ScheduleMessage, { t: 'sticky' }>>>();
  for (const { worker, msg } of log) {
    if (msg.t !== 'sticky') continue;
    const of = `${worker}\u0000${msg.key}`;
    (calls.get(of) ?? calls.set(of, []).get(of)!).push(msg);
  }
  const found: string[] = [];
  for (const [of, list] of calls) {
    const worker = of.split('\u0000')[0];
    list.sort((a, b) => a.startedAt - b.startedAt);
    let last: (typeof list)[number] | undefined;
    for (const call of list) {
      if (last && call.startedAt < last.endedAt) {
        found.push(
          `${worker}: a sticky call of ${call.key} (token ${call.fencingToken}) began ${Math.round(last.endedAt - call.startedAt)} ms before the one before it (token ${last.fencingToken}) ended`,
        );
      }
      if (!last || call.endedAt > last.endedAt) last = call;
    }
  }
  return found;
}

/**
 * Multi-key works (`multi` reports) whose held windows overlap on a key: per key, the works that held it, from their
 * start to the last time their sampler saw every lease held (`wall()`, comparable between the processes of one
 * machine). Local safety makes the windows of one key disjoint: a holder's window ends before its lease may be taken
 * over, and a release ends it before the next grant. A work never seen held has no window. The runner's probe calls
 * it too.
 */
export function multiOverlaps(log: ReadonlyArray<Received<ScheduleMessage>>): string[] {
  const windows = new Map<string, Array<{ worker: string; token: string; from: number; to: number }>>();
  for (const { worker, msg } of log) {
    if (msg.t !== 'multi' || msg.lastHeldAt === undefined) continue;
    msg.keys.forEach((key, at) => {
      const window = { worker, token: msg.fencingTokens[at], from: msg.startedAt, to: msg.lastHeldAt! };
      (windows.get(key) ?? windows.set(key, []).get(key)!).push(window);
    });
  }
  const found: string[] = [];
  for (const [key, list] of windows) {
    list.sort((a, b) => a.from - b.from);
    let last: (typeof list)[number] | undefined;
    for (const window of list) {
      if (last && window.from < last.to) {
        found.push(
          `${key}: ${window.worker}'s multi-key work (token ${window.token}) began ${Math.round(last.to - window.from)} ms before ${last.worker}'s (token ${last.token}) last saw its leases held`,
        );
      }
      if (!last || window.to > last.to) last = window;
    }
  }
  return found;
}

export function checkModes(
  log: ReadonlyArray<Received<ScheduleMessage>>,
  events: readonly ModesEvent[],
  context: ModesContext,
  pauses: ReadonlyMap<string, ReadonlyArray<readonly [number, number]>>,
): { violations: Array<{ invariant: ModesInvariant; detail: string }>; figures: ModesFigures } {
  const violations: Array<{ invariant: ModesInvariant; detail: string }> = [];
  const flag = (invariant: ModesInvariant, detail: string) => violations.push({ invariant, detail });
  for (const detail of stickyOverlaps(log)) flag('sticky: one call at a time', detail);
  for (const detail of multiOverlaps(log)) flag('multi-key: no two holders overlap on a key', detail);

  // Each grant's run: from its grant to its end — its release, or the key's next grant (a takeover, a handoff) — as
  // other sessions saw it: the end is when that write committed, which a held-back Sync or COMMIT can put long after
  // the statement (a joiner reading meanwhile still finds the run holding the key, and its outcome).
  const runs = new Map<bigint, { key: string; owner: string; from: number; to: number }>();
  const current = new Map<string, bigint>();
  for (const e of events) {
    if (e.kind === 'release' && e.oldToken !== null) {
      const run = runs.get(e.oldToken);
      if (run && run.to === Infinity) run.to = e.committedAt;
    } else if (e.kind === 'grant') {
      const before = current.get(e.key);
      const run = before === undefined ? undefined : runs.get(before);
      if (run && run.to === Infinity) run.to = e.committedAt;
      runs.set(e.token, { key: e.key, owner: e.owner ?? '?', from: e.at, to: Infinity });
      current.set(e.key, e.token);
    }
  }

  const joins: Record<string, number> = {};
  let stickyCalls = 0;
  const judged = { joinRuns: 0, joinsDrained: 0, takeovers: 0 };
  const stalls = new Map<string, Array<readonly [number, number]>>();
  for (const { worker, msg } of log) {
    if (msg.t === 'stall') (stalls.get(worker) ?? stalls.set(worker, []).get(worker)!).push([msg.at - msg.ms, msg.at]);
  }
  /** How long `worker` could not run between `from` and `to`: its SIGSTOPs or its event loop's stalls, the larger. */
  const unableToRun = (worker: string, from: number, to: number) => {
    const within = (list: ReadonlyArray<readonly [number, number]>) =>
      list.reduce((sum, [a, b]) => sum + Math.max(0, Math.min(b, to) - Math.max(a, from)), 0);
    return Math.max(within(pauses.get(worker) ?? []), within(stalls.get(worker) ?? []));
  };

  for (const { worker, msg } of log) {
    if (msg.t === 'sticky') stickyCalls++;
    if (msg.t !== 'join') continue;
    joins[msg.outcome] = (joins[msg.outcome] ?? 0) + 1;
    const what = `${worker}: a join of ${msg.key} (${msg.via}) from ${new Date(msg.startedAt).toISOString()} to +${msg.endedAt - msg.startedAt} ms settled '${msg.outcome}'`;
    if (msg.fencingToken !== undefined) {
      judged.joinRuns++;
      const run = runs.get(BigInt(msg.fencingToken));
      if (!run || run.key !== msg.key) {
        flag(
          'join: the run it waited for',
          `${what} with token ${msg.fencingToken}, which the server never granted on ${msg.key}`,
        );
      } else if (run.from > msg.endedAt + JOIN_CLOCK_SLACK_MS || run.to < msg.startedAt - JOIN_CLOCK_SLACK_MS) {
        const when =
          run.from > msg.endedAt
            ? `granted ${Math.round(run.from - msg.endedAt)} ms after the join ended`
            : `ended ${Math.round(msg.startedAt - run.to)} ms before the join began`;
        flag(
          'join: the run it waited for',
          `${what} with the outcome of token ${msg.fencingToken} (${run.owner}), ${when}`,
        );
      }
    }
    for (const drain of context.drains) {
      if (drain.key !== msg.key || msg.endedAt > drain.to) continue;
      const reached = Math.max(drain.from, context.readyAt.get(worker) ?? 0) + DRAIN_REACH_MS + LOAD_ALLOWANCE_MS;
      if (msg.startedAt < reached + unableToRun(worker, drain.from, msg.startedAt)) continue;
      judged.joinsDrained++;
      if (msg.outcome === 'drained' || msg.outcome === 'shutdown' || msg.outcome === '503') continue;
      flag(
        'join: refused on a drained key',
        `${what}${msg.fencingToken ? ` (token ${msg.fencingToken})` : ''}, ${Math.round(msg.startedAt - drain.from)} ms after ${drain.key} was drained and before its undrain`,
      );
    }
  }

  // Local safety: a takeover by another process comes after the replaced holder last saw its lease held.
  const lastHeld = new Map<string, { worker: string; at: number }>();
  for (const { worker, msg } of log)
    if (msg.t === 'held') lastHeld.set(msg.fencingToken, { worker, at: msg.lastHeldAt });
  for (const e of events) {
    if (e.kind !== 'grant' || !e.oldHeld || e.oldToken === null || e.app === e.oldOwner) continue;
    const held = lastHeld.get(e.oldToken.toString());
    if (held) judged.takeovers++;
    if (held && held.at >= e.at) {
      flag(
        'local safety',
        `${e.key}: granted to ${e.app} (token ${e.token}, #${e.seq}) while ${held.worker} still saw its lease (token ${e.oldToken}) held, ${Math.round(held.at - e.at)} ms later`,
      );
    }
  }
  return { violations, figures: { stickyCalls, joins, judged } };
}
