// Stops the run's PostgreSQL and prints the table of scenario rows the specs appended (see report.ts).
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SUMMARY_DIR } from './global-setup.js';

export default async function globalTeardown() {
  await globalThis.__LEASE_FAULTS_PG__?.destroy();
  const rowsFile = join(SUMMARY_DIR, 'summary.jsonl');
  const rows = existsSync(rowsFile)
    ? readFileSync(rowsFile, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line))
    : [];
  const wallMs = Date.now() - Number(process.env.LEASE_FAULTS_STARTED_AT ?? Date.now());
  const table = [
    '| scenario | faults injected | fenced writes checked (committed / refused) | violations | takeover ms | wall s |',
    '|---|---|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| ${r.scenario} | ${r.faults} | ${r.writes} | ${r.violations} | ${r.takeoverMs ?? '–'} | ${(r.wallMs / 1000).toFixed(1)} |`,
    ),
    '',
    `Suite wall time: ${(wallMs / 1000).toFixed(1)} s`,
  ].join('\n');
  writeFileSync(join(SUMMARY_DIR, 'summary.md'), `${table}\n`);
  console.log(`\nFault suite summary (also in artifacts/faults/summary.md)\n\n${table}\n`);
}
