/**
 * The checker can fail: each finding fires on a small hand-made history that has exactly that fault, and stays
 * quiet on the same history without it. (The failover runs show most of them firing on real histories too; this
 * covers the ones a healthy run never shows, such as fenced exclusion broken within the promoted history.)
 */
import { checkFailover, type HistoryRow, type SurvivingRow } from './support/checker.js';
import type { GrantRecord, WriteRecord } from './support/load.js';

const moments = { crashAt: 1_000, promotedAt: 1_200, switchAt: 1_300 };

let ops = 0;
function write(startedAt: number, outcome: WriteRecord['outcome'] = 'ack'): WriteRecord {
  return { opId: `op-${++ops}`, startedAt, settledAt: startedAt + 5, outcome };
}

function grant(
  key: string,
  token: number,
  grantedAt: number,
  endedAt: number | undefined,
  writes: WriteRecord[] = [],
  extra: Partial<GrantRecord> = {},
): GrantRecord {
  return {
    client: 0,
    process: 0,
    key,
    fencingToken: BigInt(token),
    leaseToken: `lease-${key}-${token}-${grantedAt}`,
    grantedAt,
    endedAt,
    endReason: endedAt === undefined ? undefined : 'released',
    writes,
    ...extra,
  };
}

function historyOf(grants: GrantRecord[], order?: string[]): HistoryRow[] {
  const rows = grants.flatMap((g) =>
    g.writes
      .filter((w) => w.outcome === 'ack')
      .map((w) => ({
        opId: w.opId,
        target: g.key,
        fencingToken: g.fencingToken,
        leaseToken: g.leaseToken,
        commitSeq: 0n,
      })),
  );
  const ordered = order ? order.map((opId) => rows.find((row) => row.opId === opId)!) : rows;
  return ordered.map((row, i) => ({ ...row, commitSeq: BigInt(i + 1) }));
}

const counters = (history: HistoryRow[]) => {
  const map = new Map<string, bigint>();
  for (const row of history) map.set(row.target, (map.get(row.target) ?? 0n) + 1n);
  return map;
};

test('a healthy failover history has no findings', () => {
  const grants = [
    grant('k', 1, 100, 200, [write(150)]),
    grant('k', 2, 300, 400, [write(350)]),
    grant('k', 3, 1_400, 1_500, [write(1_450)]),
  ];
  const history = historyOf(grants);
  const f = checkFailover(grants, moments, [], history, counters(history));
  expect(f).toMatchObject({
    tokensAgain: 0,
    tokenViolations: [],
    twoHolders: [],
    notToldInTime: [],
    exclusionViolations: [],
    acknowledgedWritesLost: { before: 0, after: 0 },
    cutOffHolders: 0,
    acknowledgedReleasesBack: 0,
  });
});

test('tokens handed out again after the failover', () => {
  const grants = [grant('k', 7, 100, 200, [write(150)]), grant('k', 5, 1_400, 1_500, [write(1_450)])];
  const history = historyOf(grants);
  const f = checkFailover(grants, moments, [], history, counters(history));
  expect(f.tokensAgain).toBe(1);
  expect(f.tokenViolations).toEqual(['k: token 5 granted after the failover, 7 before']);
});

test('an acknowledged write missing from the promoted history is lost', () => {
  const lost = grant('k', 1, 100, 200, [write(150)]);
  const f = checkFailover([lost], moments, [], [], new Map([['k', 0n]]));
  expect(f.acknowledgedWritesLost).toEqual({ before: 1, after: 0 });
});

test('a released row back on the promoted server', () => {
  const released = grant('k', 1, 100, 200, [write(150)], { releaseAckedAt: 210 });
  const surviving: SurvivingRow[] = [
    { targetKey: 'k', leaseToken: released.leaseToken, fencingToken: 1n, blocksForMs: 900 },
  ];
  const history = historyOf([released]);
  const f = checkFailover([released], moments, surviving, history, counters(history));
  expect(f.acknowledgedReleasesBack).toBe(1);
  expect(f.releasedRowBlocksMs).toBe(900);
});

test('a cut-off holder not told before a newer grant wrote, and two holders at once', () => {
  const old = grant('k', 9, 800, 1_600, [], { endReason: 'lost', lostReason: 'taken-over' });
  const newer = grant('k', 4, 1_400, 1_500, [write(1_450)]);
  const history = historyOf([newer]);
  const f = checkFailover([old, newer], moments, [], history, counters(history));
  expect(f.cutOffHolders).toBe(1);
  expect(f.cutOffEndedBy).toEqual({ lost: 1, released: 0, never: 0 });
  expect(f.notToldInTime).toHaveLength(1);
  expect(f.twoHolders).toHaveLength(1);
  // Told in time: ended before the newer grant.
  const told = checkFailover([{ ...old, endedAt: 1_350 }, newer], moments, [], history, counters(history));
  expect(told.notToldInTime).toEqual([]);
  expect(told.twoHolders).toEqual([]);
  // Its row survived: not cut off.
  const kept = checkFailover(
    [{ ...old, endedAt: 1_350 }, newer],
    moments,
    [{ targetKey: 'k', leaseToken: old.leaseToken, fencingToken: 9n, blocksForMs: 0 }],
    history,
    counters(history),
  );
  expect(kept.cutOffHolders).toBe(0);
});

test('a holder whose release committed as the primary crashed is not cut off', () => {
  // Released just after the crash moment (a backend still committing while the postmaster is gone): the promoted
  // row is its own, released — its fencing token, no lease token. Nothing of it was lost.
  const releasing = grant('k', 9, 800, 1_010, [write(850)]);
  const history = historyOf([releasing]);
  const released: SurvivingRow = { targetKey: 'k', leaseToken: null, fencingToken: 9n, blocksForMs: 0 };
  const f = checkFailover([releasing], moments, [released], history, counters(history));
  expect(f.cutOffHolders).toBe(0);
  // Released, then the key granted again before the crash: the promoted row is the newer grant's.
  const newer: SurvivingRow = { targetKey: 'k', leaseToken: 'lease-k-10', fencingToken: 10n, blocksForMs: 900 };
  const superseded = checkFailover([releasing], moments, [newer], history, counters(history));
  expect(superseded.cutOffHolders).toBe(0);
  // A released row of an older lease of the key does not stand for it.
  const older = checkFailover([releasing], moments, [{ ...released, fencingToken: 8n }], history, counters(history));
  expect(older.cutOffHolders).toBe(1);
});

test('fenced exclusion broken within the promoted history: an older lease writes after a newer one', () => {
  const a = grant('k', 1, 1_400, 1_600, [write(1_410), write(1_480)]);
  const b = grant('k', 2, 1_420, 1_500, [write(1_430)]);
  const history = historyOf([a, b], [a.writes[0].opId, b.writes[0].opId, a.writes[1].opId]);
  const f = checkFailover([a, b], moments, [], history, counters(history));
  expect(f.exclusionViolations).toEqual(['k: lease with token 1 wrote again at #3 after a newer lease wrote']);
});

test('a lost update and a refused write that committed', () => {
  const a = grant('k', 1, 1_400, 1_500, [write(1_450)]);
  const refused = grant('k', 2, 1_600, 1_700, [write(1_650, 'refused')]);
  const history = [
    ...historyOf([a]),
    { opId: refused.writes[0].opId, target: 'k', fencingToken: 2n, leaseToken: refused.leaseToken, commitSeq: 2n },
  ];
  const f = checkFailover([a, refused], moments, [], history, new Map([['k', 1n]]));
  expect(f.exclusionViolations).toEqual([
    `refused write ${refused.writes[0].opId} on k (token 2) committed`,
    'k: counter 1 but 2 history rows (lost update)',
  ]);
});

test('an old holder told late after the switch, and an old-history write committed on the promoted server', () => {
  // Held across the switch (1 300), lost 1 200 ms after it; a write it sent after the switch was acknowledged.
  const late = grant('k', 9, 800, 2_500, [write(1_350)], { endReason: 'lost', lostReason: 'taken-over' });
  const history = historyOf([late]);
  const f = checkFailover([late], moments, [], history, counters(history), 1_000);
  expect(f.oldHolders).toBe(1);
  expect(f.oldHoldersEndedBy).toEqual({ 'lost: taken-over': 1 });
  expect(f.oldHoldersEndedWithinMs).toBe(1_200);
  expect(f.oldHoldersLate).toEqual([
    'k: holder of token 9 (client 0) ended 1200 ms after the switch (lost: taken-over)',
  ]);
  expect(f.oldHistoryWritesAfterSwitch).toEqual([
    `k: write ${late.writes[0].opId} of token 9 (granted before the switch) committed 55 ms after it`,
  ]);
  // Told 400 ms after the switch, its write refused: quiet.
  const told = grant('k', 9, 800, 1_700, [write(1_350, 'refused')], { endReason: 'lost', lostReason: 'failover' });
  const quiet = checkFailover([told], moments, [], [], new Map([['k', 0n]]), 1_000);
  expect(quiet.oldHoldersLate).toEqual([]);
  expect(quiet.oldHistoryWritesAfterSwitch).toEqual([]);
  expect(quiet.oldHoldersEndedBy).toEqual({ 'lost: failover': 1 });
  // Never ended at all: late.
  const never = checkFailover([grant('k', 9, 800, undefined)], moments, [], [], new Map([['k', 0n]]), 1_000);
  expect(never.oldHoldersLate).toEqual(['k: holder of token 9 (client 0) ended never']);
});
