// Prints the failover table (one line per scenario, ranges over its runs) and writes it to summary.md.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SUMMARY_DIR } from './global-setup.js';

const range = (values) => {
  const min = Math.min(...values);
  const max = Math.max(...values);
  return min === max ? String(min) : `${min}–${max}`;
};

/** How the old holders ended, summed over the runs: "lost: failover 21, released 4". */
const endedBy = (runs) => {
  const total = {};
  for (const run of runs) {
    for (const [how, n] of Object.entries(run.oldHoldersEndedBy ?? {})) total[how] = (total[how] ?? 0) + n;
  }
  return (
    Object.entries(total)
      .map(([how, n]) => `${how} ${n}`)
      .join(', ') || 'none'
  );
};

// The columns first, then what tells how each run went.
const HEADERS = [
  'replication, window of WAL lost',
  'runs',
  'tokens handed out again after promotion',
  'acknowledged fenced writes lost',
  'released rows back (longest block)',
  'two holders at once',
  'holders cut off: told / ended by own release',
  'cut-off holders not told before a newer write',
  'exclusion violations in the promoted history',
  'old holders at the switch: all ended within (how)',
  'old-history fenced writes committed after the switch',
  'heartbeat backends on the primary at the crash (most in one process)',
  'grants/s',
  'outage ms',
];

export default async function globalTeardown() {
  const file = join(SUMMARY_DIR, 'summary.jsonl');
  const lines = existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean) : [];
  const rows = lines.map((line) => JSON.parse(line));
  const scenarios = [...new Set(rows.map((r) => r.scenario))];
  const wallMs = Date.now() - Number(process.env.FAILOVER_STARTED_AT ?? Date.now());
  const table = [
    `| ${HEADERS.join(' | ')} |`,
    `|${HEADERS.map(() => '---|').join('')}`,
    ...scenarios.map((name) => {
      const runs = rows.filter((r) => r.scenario === name);
      const of = (key) => range(runs.map((r) => r[key]));
      const cells = [
        name,
        runs.length,
        `${of('tokenValuesAgain')} values`,
        of('acknowledgedWritesLost'),
        `${of('releasedRowsBack')} (${of('releasedRowBlocksMs')} ms)`,
        of('twoHolders'),
        `${of('cutOffHolders')}: ${of('cutOffLost')} / ${of('cutOffReleased')}`,
        of('notToldInTime'),
        of('exclusionViolations'),
        `${of('oldHolders')}: ${range(runs.map((r) => r.oldHoldersEndedWithinMs ?? Infinity))} ms (${endedBy(runs)})`,
        of('oldHistoryWritesAfterSwitch'),
        `${of('heartbeatBackends')} (${of('heartbeatBackendsPerProcess')})`,
        of('grantRate'),
        of('outageMs'),
      ];
      return `| ${cells.join(' | ')} |`;
    }),
    '',
    `Suite wall time: ${(wallMs / 1000).toFixed(1)} s. Details of every run: artifacts/failover/<run>.json; ` +
      'its server logs: artifacts/failover/<run>/.',
  ].join('\n');
  writeFileSync(join(SUMMARY_DIR, 'summary.md'), `${table}\n`);
  console.log(`\nFailover suite (also in artifacts/failover/summary.md)\n\n${table}\n`);
}
