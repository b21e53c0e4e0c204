/**
 * The failover checker. Inputs: what the clients recorded (grants and fenced writes, one monotonic clock), the
 * moments of the failover (crash, switch of clients to the promoted standby), the lease rows the promoted standby
 * had at promotion (before any client reached it), and its final history of fenced writes.
 *
 * Grants are "before" when granted before the clients were switched (so by the old primary: the front proxy refuses
 * connections between the crash and the switch), "after" otherwise. What it measures:
 *
 * - tokens handed out again: grants after the failover whose fencing token is not larger than the largest token
 *   granted before it (the sequence went back with the lost WAL); per key, the checker's rule ("tokens of grants
 *   after the failover are larger than every token granted before") lists each offending grant;
 * - acknowledged fenced writes lost: writes a client heard committed that the promoted history lacks;
 * - released rows back: rows on the promoted standby of leases whose release had been acknowledged (the key stays
 *   blocked until the row expires), and for how long they block their key;
 * - cut-off holders: leases held at the crash whose row the promoted standby lacks (its own release — a released row
 *   with its token — or a later grant of its key there is no loss) — and whether each was told (signal aborted)
 *   before any newer grant's fenced write on its key was acknowledged;
 * - two holders at once: a grant made while an earlier grant of the same key had not yet ended (signal not aborted);
 * - fenced exclusion within the promoted history: per key, in commit order, each lease's writes are one contiguous
 *   run (no lease writes again after a newer one has written), every counter equals its history rows, no refused
 *   write committed. This held before the failover work and must keep holding;
 * - old holders told: every lease of the old history still held at the switch ends (lost, or released by its holder)
 *   within `toldWithinMs` of the switch, and none of its fenced writes sent to the promoted server commits. This is
 *   what the library guarantees after an asynchronous failover, where "told before any newer grant" cannot be: the
 *   promoted server may grant a key whose row it never received the instant it accepts connections.
 */
import type { GrantRecord } from './load.js';

export interface FailoverMoments {
  crashAt: number;
  /** The promoted standby answered pg_promote. */
  promotedAt: number;
  /** Clients re-pointed to the promoted standby. */
  switchAt: number;
}

/** A lease row of the promoted standby, read right after promotion. */
export interface SurvivingRow {
  targetKey: string;
  /** Null for a released row. */
  leaseToken: string | null;
  fencingToken: bigint;
  /** How much longer the row blocks its key (database clock at the time of reading), ms; 0 when expired. */
  blocksForMs: number;
}

export interface HistoryRow {
  opId: string;
  target: string;
  fencingToken: bigint;
  leaseToken: string;
  commitSeq: bigint;
}

export interface FailoverFindings {
  grantsBefore: number;
  grantsAfter: number;
  /** Grants after the failover whose token is ≤ the largest token granted before it (any key). */
  tokensAgain: number;
  /** Distinct such token values. */
  tokenValuesAgain: number;
  /** Per key: grants after the failover with a token ≤ the largest granted on that key before it. */
  tokenViolations: string[];
  /** The largest token before and the smallest after, to show how far the sequence went back. */
  maxTokenBefore: bigint | null;
  minTokenAfter: bigint | null;
  acknowledgedWrites: { before: number; after: number };
  acknowledgedWritesLost: { before: number; after: number };
  acknowledgedReleasesBack: number;
  /** Longest time a released-but-back row blocked its key after promotion, ms. */
  releasedRowBlocksMs: number;
  /** Leases held at the crash (not yet ended) and how many of them the promoted standby lacks. */
  heldAtCrash: number;
  cutOffHolders: number;
  /** Cut-off holders told by a LeaseLostError / ended by their own release / not ended until the end. */
  cutOffEndedBy: { lost: number; released: number; never: number };
  /** Each cut-off holder: when it was granted and ended, relative to the failover, and its key's next grant. */
  cutOffDetails: string[];
  /** Cut-off holders still not ended when a newer grant of their key had a fenced write acknowledged. */
  notToldInTime: string[];
  /** Grants made while an earlier grant of the same key had not ended; with the old holder's remaining lead. */
  twoHolders: string[];
  /** Fenced exclusion within the promoted history (must stay empty). */
  exclusionViolations: string[];
  /** Leases of the old history (granted before the switch) still held at the switch. */
  oldHolders: number;
  /** The longest time from the switch until one of them ended, ms (0 when none). */
  oldHoldersEndedWithinMs: number;
  /** How they ended: lost (by reason) or released by their holder. */
  oldHoldersEndedBy: Record<string, number>;
  /** Old holders that had not ended `toldWithinMs` after the switch. */
  oldHoldersLate: string[];
  /** Fenced writes of old-history leases sent after the switch (so to the promoted server) that committed. */
  oldHistoryWritesAfterSwitch: string[];
}

const ms = (value: number) => `${Math.round(value)} ms`;

export function checkFailover(
  grants: GrantRecord[],
  moments: FailoverMoments,
  surviving: SurvivingRow[],
  history: HistoryRow[],
  counters: Map<string, bigint>,
  toldWithinMs = Infinity,
): FailoverFindings {
  const before = grants.filter((g) => g.grantedAt < moments.switchAt);
  const after = grants.filter((g) => g.grantedAt >= moments.switchAt);

  // Tokens.
  let maxTokenBefore: bigint | null = null;
  const maxBeforeByKey = new Map<string, bigint>();
  for (const g of before) {
    if (maxTokenBefore === null || g.fencingToken > maxTokenBefore) maxTokenBefore = g.fencingToken;
    const top = maxBeforeByKey.get(g.key);
    if (top === undefined || g.fencingToken > top) maxBeforeByKey.set(g.key, g.fencingToken);
  }
  let minTokenAfter: bigint | null = null;
  const again = after.filter((g) => maxTokenBefore !== null && g.fencingToken <= maxTokenBefore);
  const tokenViolations: string[] = [];
  for (const g of after) {
    if (minTokenAfter === null || g.fencingToken < minTokenAfter) minTokenAfter = g.fencingToken;
    const top = maxBeforeByKey.get(g.key);
    if (top !== undefined && g.fencingToken <= top) {
      tokenViolations.push(`${g.key}: token ${g.fencingToken} granted after the failover, ${top} before`);
    }
  }

  // Writes.
  const committed = new Set(history.map((row) => row.opId));
  const acknowledgedWrites = { before: 0, after: 0 };
  const acknowledgedWritesLost = { before: 0, after: 0 };
  const exclusionViolations: string[] = [];
  for (const g of grants) {
    for (const w of g.writes) {
      // Started before the switch: sent to the old primary (nothing reaches the promoted one before the switch).
      const era = w.startedAt < moments.switchAt ? 'before' : 'after';
      if (w.outcome === 'ack') {
        acknowledgedWrites[era]++;
        if (!committed.has(w.opId)) acknowledgedWritesLost[era]++;
      }
      if (w.outcome === 'refused' && committed.has(w.opId)) {
        exclusionViolations.push(`refused write ${w.opId} on ${g.key} (token ${g.fencingToken}) committed`);
      }
    }
  }

  // Fenced exclusion within the promoted history: each lease's writes form one run per key, in commit order.
  const byKey = new Map<string, HistoryRow[]>();
  for (const row of [...history].sort((a, b) => (a.commitSeq < b.commitSeq ? -1 : 1))) {
    byKey.set(row.target, [...(byKey.get(row.target) ?? []), row]);
  }
  for (const [key, rows] of byKey) {
    const finished = new Set<string>();
    let current: string | undefined;
    for (const row of rows) {
      if (row.leaseToken === current) continue;
      if (finished.has(row.leaseToken)) {
        exclusionViolations.push(
          `${key}: lease with token ${row.fencingToken} wrote again at #${row.commitSeq} after a newer lease wrote`,
        );
      }
      if (current) finished.add(current);
      current = row.leaseToken;
    }
  }
  for (const [key, n] of counters) {
    const rows = BigInt(byKey.get(key)?.length ?? 0);
    if (n !== rows) exclusionViolations.push(`${key}: counter ${n} but ${rows} history rows (lost update)`);
  }

  // Rows at promotion.
  const rowOf = new Map(surviving.map((row) => [`${row.targetKey}\u0000${row.leaseToken}`, row]));
  const survived = (g: GrantRecord) => rowOf.get(`${g.key}\u0000${g.leaseToken}`);
  let acknowledgedReleasesBack = 0;
  let releasedRowBlocksMs = 0;
  for (const g of before) {
    const row = survived(g);
    if (row && g.releaseAckedAt !== undefined && g.releaseAckedAt < moments.crashAt) {
      acknowledgedReleasesBack++;
      releasedRowBlocksMs = Math.max(releasedRowBlocksMs, row.blocksForMs);
    }
  }

  // Holders at the crash whose row is gone: were they told before a newer grant's write was acknowledged?
  const heldAtCrash = before.filter((g) => g.endedAt === undefined || g.endedAt > moments.crashAt);
  // A released row carrying the lease's own token is its release, committed and replicated; a row of the key with a
  // larger token is a later grant, made once the lease had ended (released, expired, taken over) before the crash.
  // Either way the promoted server lost nothing of it.
  const endedBeforeCrash = (g: GrantRecord) =>
    surviving.some(
      (row) =>
        row.targetKey === g.key &&
        ((row.leaseToken === null && row.fencingToken === g.fencingToken) || row.fencingToken > g.fencingToken),
    );
  const cutOff = heldAtCrash.filter((g) => !survived(g) && !endedBeforeCrash(g));
  const cutOffEndedBy = { lost: 0, released: 0, never: 0 };
  const notToldInTime: string[] = [];
  const cutOffDetails: string[] = [];
  const sinceSwitch = (at: number) => `${at >= moments.switchAt ? '+' : ''}${ms(at - moments.switchAt)}`;
  for (const old of cutOff) {
    if (old.endedAt === undefined) cutOffEndedBy.never++;
    else cutOffEndedBy[old.endReason ?? 'released']++;
    const next = after.find((g) => g.key === old.key);
    const blocker = surviving.find((row) => row.targetKey === old.key);
    const why = old.lostReason ?? old.endReason;
    const ended = old.endedAt === undefined ? 'never' : `${sinceSwitch(old.endedAt)} (${why})`;
    const row = !blocker
      ? 'none'
      : blocker.leaseToken === null
        ? `token ${blocker.fencingToken}, released`
        : `token ${blocker.fencingToken}, blocking ${ms(blocker.blocksForMs)}`;
    const nextGrant = next ? `token ${next.fencingToken} at ${sinceSwitch(next.grantedAt)}` : 'none';
    cutOffDetails.push(
      `${old.key} token ${old.fencingToken} (client ${old.client}): ` +
        `granted ${sinceSwitch(old.grantedAt)}, ended ${ended} relative to the switch; ` +
        `the promoted row of its key: ${row}; next grant: ${nextGrant}`,
    );
    for (const newer of after) {
      if (newer.key !== old.key) continue;
      const ack = newer.writes.find((w) => w.outcome === 'ack');
      if (ack && (old.endedAt === undefined || old.endedAt > ack.settledAt)) {
        const ended =
          old.endedAt === undefined
            ? 'never ended'
            : `ended ${ms(old.endedAt - ack.settledAt)} later (${old.endReason})`;
        notToldInTime.push(
          `${old.key}: holder of token ${old.fencingToken} (client ${old.client}) ${ended}, ` +
            `after token ${newer.fencingToken}'s fenced write was acknowledged ` +
            `${ms(ack.settledAt - moments.switchAt)} after the switch`,
        );
        break;
      }
    }
  }

  // Two holders at once, whatever the cause.
  const twoHolders: string[] = [];
  const grantsByKey = new Map<string, GrantRecord[]>();
  for (const g of grants) grantsByKey.set(g.key, [...(grantsByKey.get(g.key) ?? []), g]);
  for (const [key, list] of grantsByKey) {
    list.sort((a, b) => a.grantedAt - b.grantedAt);
    for (let i = 0; i < list.length; i++) {
      const newer = list[i];
      for (let j = 0; j < i; j++) {
        const older = list[j];
        if (older.endedAt === undefined || older.endedAt > newer.grantedAt) {
          const more = older.endedAt === undefined ? 'ever' : ms(older.endedAt - newer.grantedAt);
          twoHolders.push(
            `${key}: token ${newer.fencingToken} granted while token ${older.fencingToken} ` +
              `was still held (for ${more} more, ended by ${older.endReason ?? 'nothing'})`,
          );
        }
      }
    }
  }

  // Old holders told: every lease of the old history held at the switch ends soon after it, and never writes there.
  const oldAtSwitch = before.filter((g) => g.endedAt === undefined || g.endedAt > moments.switchAt);
  const oldHoldersEndedBy: Record<string, number> = {};
  const oldHoldersLate: string[] = [];
  let oldHoldersEndedWithinMs = 0;
  for (const old of oldAtSwitch) {
    const how = old.endedAt === undefined ? 'never' : old.endReason === 'lost' ? `lost: ${old.lostReason}` : 'released';
    oldHoldersEndedBy[how] = (oldHoldersEndedBy[how] ?? 0) + 1;
    const after = old.endedAt === undefined ? Infinity : old.endedAt - moments.switchAt;
    oldHoldersEndedWithinMs = Math.max(oldHoldersEndedWithinMs, after);
    if (after > toldWithinMs) {
      oldHoldersLate.push(
        `${old.key}: holder of token ${old.fencingToken} (client ${old.client}) ended ` +
          `${old.endedAt === undefined ? 'never' : `${ms(after)} after the switch (${how})`}`,
      );
    }
  }
  const oldHistoryWritesAfterSwitch = before.flatMap((g) =>
    g.writes
      .filter((w) => w.startedAt >= moments.switchAt && w.outcome === 'ack')
      .map(
        (w) =>
          `${g.key}: write ${w.opId} of token ${g.fencingToken} (granted before the switch) committed ` +
          `${ms(w.settledAt - moments.switchAt)} after it`,
      ),
  );

  return {
    grantsBefore: before.length,
    grantsAfter: after.length,
    tokensAgain: again.length,
    tokenValuesAgain: new Set(again.map((g) => g.fencingToken)).size,
    tokenViolations,
    maxTokenBefore,
    minTokenAfter,
    acknowledgedWrites,
    acknowledgedWritesLost,
    acknowledgedReleasesBack,
    releasedRowBlocksMs,
    heldAtCrash: heldAtCrash.length,
    cutOffHolders: cutOff.length,
    cutOffEndedBy,
    cutOffDetails,
    notToldInTime,
    twoHolders,
    exclusionViolations,
    oldHolders: oldAtSwitch.length,
    oldHoldersEndedWithinMs,
    oldHoldersEndedBy,
    oldHoldersLate,
    oldHistoryWritesAfterSwitch,
  };
}
