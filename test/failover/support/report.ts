/**
 * The suite's table: each run appends one row to artifacts/failover/summary.jsonl and writes its details (every
 * finding, not only counts) to artifacts/failover/<scenario>-<run>.json; global-teardown.js prints the table, one line
 * per scenario with the range over its runs, and writes it to artifacts/failover/summary.md.
 */
import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { RunResult } from './scenario.js';
import { ARTIFACTS } from './scenario.js';

/** One run, as the table needs it (plain JSON). */
export interface SummaryRow {
  scenario: string;
  tokenValuesAgain: number;
  /** How far the sequence went back: largest token before → smallest after. */
  tokenJump: string;
  acknowledgedWritesLost: number;
  acknowledgedWrites: number;
  releasedRowsBack: number;
  releasedRowBlocksMs: number;
  twoHolders: number;
  cutOffHolders: number;
  cutOffLost: number;
  cutOffReleased: number;
  notToldInTime: number;
  exclusionViolations: number;
  grantRate: number;
  heartbeatBackends: number;
  heartbeatBackendsPerProcess: number;
  /** Leases of the old history held at the switch, the longest until one ended (ms), how they ended. */
  oldHolders: number;
  oldHoldersEndedWithinMs: number;
  oldHoldersEndedBy: Record<string, number>;
  oldHoldersLate: number;
  oldHistoryWritesAfterSwitch: number;
  outageMs: number;
  wallMs: number;
}

/** File-name form of a scenario's run: `async-standby-disconnected-2-s-run1`. */
export function runSlug(scenario: string, run: number): string {
  return `${scenario
    .replace(/[^a-z0-9]+/gi, '-')
    .replace(/^-|-$/g, '')
    .toLowerCase()}-run${run}`;
}

const json = (value: unknown) => JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? v.toString() : v), 2);

export function recordRun(result: RunResult, run: number): SummaryRow {
  const f = result.findings;
  const row: SummaryRow = {
    scenario: result.scenario.name,
    tokenValuesAgain: f.tokenValuesAgain,
    tokenJump: `${f.maxTokenBefore ?? '–'} → ${f.minTokenAfter ?? '–'}`,
    acknowledgedWritesLost: f.acknowledgedWritesLost.before + f.acknowledgedWritesLost.after,
    acknowledgedWrites: f.acknowledgedWrites.before + f.acknowledgedWrites.after,
    releasedRowsBack: f.acknowledgedReleasesBack,
    releasedRowBlocksMs: Math.round(f.releasedRowBlocksMs),
    twoHolders: f.twoHolders.length,
    cutOffHolders: f.cutOffHolders,
    cutOffLost: f.cutOffEndedBy.lost,
    cutOffReleased: f.cutOffEndedBy.released,
    notToldInTime: f.notToldInTime.length,
    exclusionViolations: f.exclusionViolations.length,
    grantRate: Math.round(result.grantRate),
    heartbeatBackends: result.heartbeatBackends,
    heartbeatBackendsPerProcess: result.heartbeatBackendsPerProcess,
    oldHolders: f.oldHolders,
    oldHoldersEndedWithinMs: Math.round(f.oldHoldersEndedWithinMs),
    oldHoldersEndedBy: f.oldHoldersEndedBy,
    oldHoldersLate: f.oldHoldersLate.length,
    oldHistoryWritesAfterSwitch: f.oldHistoryWritesAfterSwitch.length,
    outageMs: Math.round(result.outageMs),
    wallMs: Math.round(result.wallMs),
  };
  mkdirSync(ARTIFACTS, { recursive: true });
  appendFileSync(join(ARTIFACTS, 'summary.jsonl'), `${JSON.stringify(row)}\n`);
  writeFileSync(join(ARTIFACTS, `${runSlug(result.scenario.name, run)}.json`), json(result));
  console.log(
    `[failover] ${row.scenario}: tokens again ${row.tokenValuesAgain} (${row.tokenJump}); ` +
      `acknowledged writes lost ${row.acknowledgedWritesLost}/${row.acknowledgedWrites}; ` +
      `released rows back ${row.releasedRowsBack} ` +
      `(blocking ≤ ${row.releasedRowBlocksMs} ms); two holders ${row.twoHolders}; cut-off holders ${row.cutOffHolders} ` +
      `(told ${row.cutOffLost}, released ${row.cutOffReleased}, not told in time ${row.notToldInTime}); exclusion ` +
      `violations ${row.exclusionViolations}; old holders at the switch ${row.oldHolders}, all ended within ` +
      `${row.oldHoldersEndedWithinMs} ms (${JSON.stringify(row.oldHoldersEndedBy)}; late ${row.oldHoldersLate}, ` +
      `old-history writes committed after the switch ${row.oldHistoryWritesAfterSwitch}); heartbeat backends at the ` +
      `crash ${row.heartbeatBackends} (at most ${row.heartbeatBackendsPerProcess} per process); ` +
      `${row.grantRate} grants/s; outage ${row.outageMs} ms; ${(row.wallMs / 1000).toFixed(1)} s`,
  );
  return row;
}
