/**
 * The suite's table: each run appends one row to artifacts/cluster/summary.jsonl and writes its details to
 * artifacts/cluster/<run>.json; global-teardown.js prints the table and writes artifacts/cluster/summary.md.
 */
import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ARTIFACTS, type ClusterRun } from './scenario.js';

/** Every finding that breaks a property the suite asserts (with the guard on, all must be empty). */
export function violations(run: ClusterRun): Record<string, string[]> {
  const f = run.findings;
  return {
    'fenced exclusion': f.exclusionViolations,
    'token went back': f.tokenViolations,
    'two holders at once': f.twoHolders,
    'old-history write committed on the new leader': f.oldHistoryWritesAfterSwitch,
    'old lease not ended in time': f.oldHoldersLate,
  };
}

export function slug(name: string): string {
  return name
    .replace(/[^a-z0-9]+/gi, '-')
    .replace(/^-|-$/g, '')
    .toLowerCase();
}

const json = (value: unknown) => JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? v.toString() : v), 2);
const ms = (value: number) => `${Math.round(value)} ms`;

export function recordRun(run: ClusterRun): void {
  const f = run.findings;
  const found = Object.entries(violations(run)).filter(([, list]) => list.length > 0);
  const total = found.reduce((sum, [, list]) => sum + list.length, 0);
  const lostWrites = f.acknowledgedWritesLost.before + f.acknowledgedWritesLost.after;
  const endedBy = Object.entries(f.oldHoldersEndedBy)
    .map(([how, n]) => `${how} ${n}`)
    .join(', ');
  const event = { kill: '1 / 0 / 0', 'cut-off': '0 / 1 / 0', switchover: '0 / 0 / 1' }[run.scenario.event];
  const cells = [
    run.scenario.name,
    run.scenario.timelineGuard ? 'on' : '**off** (control)',
    event,
    `${run.oldLeader} → ${run.newLeader} (${run.timelineBefore} → ${run.timelineAfter})`,
    `${run.grants} (${f.grantsBefore} before, ${f.grantsAfter} after)`,
    `${run.fencedWrites.acknowledged} / ${run.fencedWrites.refused} / ${run.fencedWrites.failed}`,
    total === 0 ? '0' : `**${total}**: ${found.map(([what, list]) => `${what} ${list.length}`).join(', ')}`,
    String(f.cutOffHolders),
    String(lostWrites),
    ms(run.oldLeaderLastWritableMs),
    ms(run.promotedMs),
    ms(run.switchMs),
    ms(run.recoveryMs),
    ms(run.noGrantsMs),
    f.oldHolders === 0
      ? 'none held'
      : `${f.oldHolders}: ${Number.isFinite(f.oldHoldersEndedWithinMs) ? ms(f.oldHoldersEndedWithinMs) : 'never'} (${endedBy})`,
    `${(run.wallMs / 1000).toFixed(1)} s`,
  ];
  mkdirSync(ARTIFACTS, { recursive: true });
  appendFileSync(join(ARTIFACTS, 'summary.jsonl'), `${JSON.stringify({ scenario: run.scenario.name, cells })}\n`);
  writeFileSync(join(ARTIFACTS, `${slug(run.scenario.name)}.json`), json(run));
  console.log(
    `[cluster] ${run.scenario.name} (guard ${run.scenario.timelineGuard ? 'on' : 'off'}): ${run.oldLeader} → ` +
      `${run.newLeader}, timeline ${run.timelineBefore} → ${run.timelineAfter}; grants ${run.grants} ` +
      `(${f.grantsBefore} before, ${f.grantsAfter} after); fenced writes ${run.fencedWrites.acknowledged} acknowledged, ` +
      `${run.fencedWrites.refused} refused, ${run.fencedWrites.failed} failed; violations ${total}` +
      `${found.length ? ` (${found.map(([what, list]) => `${what}: ${list.slice(0, 3).join('; ')}`).join(' | ')})` : ''}; ` +
      `acknowledged grants lost ${f.cutOffHolders}, fenced writes lost ${lostWrites}; old leader writable until ` +
      `+${ms(run.oldLeaderLastWritableMs)}, new leader up at +${ms(run.promotedMs)}, HAProxy there at ` +
      `+${ms(run.switchMs)}, first grant ${ms(run.recoveryMs)} after the new leader was up ` +
      `(no grant for ${ms(run.noGrantsMs)}); long jobs: ${run.holds.join('; ')}; waits timed out ` +
      `${run.waitTimeouts}, busy ${run.busy}, errors ${run.errors}; ${(run.wallMs / 1000).toFixed(1)} s`,
  );
}
