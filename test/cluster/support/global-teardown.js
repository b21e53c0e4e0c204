// Prints the cluster table (one line per run) and writes it to artifacts/cluster/summary.md.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SUMMARY_DIR } from './global-setup.js';

const HEADERS = [
  'scenario',
  'timeline guard',
  'kills / cut-offs / switchovers',
  'leader → new leader (server timeline)',
  'grants',
  'fenced writes acknowledged / refused / failed',
  'violations',
  'acknowledged grants lost',
  'acknowledged fenced writes lost',
  'old leader took writes until, after the event',
  'new leader up, after the event',
  'HAProxy routes there (the switch), after the event',
  'recovery: new leader up → first grant',
  'no grant for',
  'old leases at the switch: all ended within, after the switch (how)',
  'wall',
];

export default async function globalTeardown() {
  const file = join(SUMMARY_DIR, 'summary.jsonl');
  const rows = existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l))
    : [];
  const wallMs = Date.now() - Number(process.env.CLUSTER_STARTED_AT ?? Date.now());
  const table = [
    `| ${HEADERS.join(' | ')} |`,
    `|${HEADERS.map(() => '---|').join('')}`,
    ...rows.map((r) => `| ${r.cells.join(' | ')} |`),
    '',
    `Suite wall time: ${(wallMs / 1000).toFixed(1)} s. Violations: fenced exclusion in the history, a key's token ` +
      'going back, two holders of a key at once, an old-history fenced write committed on the new leader, an old ' +
      'lease not ended within two heartbeat intervals + 1 s of the switch. Details of every run: ' +
      'artifacts/cluster/<run>.json; the logs (etcd, Patroni and PostgreSQL per node, HAProxy): artifacts/cluster/cluster/.',
  ].join('\n');
  writeFileSync(join(SUMMARY_DIR, 'summary.md'), `${table}\n`);
  console.log(`\nCluster suite (also in artifacts/cluster/summary.md)\n\n${table}\n`);
}
