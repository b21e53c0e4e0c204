/**
 * `npm run bench:compare [-- <git revision>]` — did a row of the bench get worse? Compares bench/results/latest.json
 * with the one committed at the revision (default: the last commit that changed it, before the working copy's).
 *
 * A machine that runs a scenario slower moves every row of it, the baselines' too: each library row's move (its
 * throughput, else its p50, as a factor where below 1 is worse) is shown next to the median move of the scenario's
 * rows that are not the library's (advisory locks, the seed's SQL, @verrou/core, the plain transaction, the undecorated
 * endpoint), and the row is flagged when it moved more than 20 % worse than they did. A scenario with no such row is
 * compared raw. Rows new or gone are listed. Exits 0 either way: it reports, it does not judge noise.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

interface ResultRow {
  scenario: string;
  implementation: string;
  opsPerSec: number | null;
  p50Ms: number | null;
}

const RESULTS = 'bench/results/latest.json';
const root = dirname(dirname(fileURLToPath(import.meta.url)));
const git = (...args: string[]) => execFileSync('git', args, { cwd: root, encoding: 'utf8' });

function rowsOf(json: string): ResultRow[] {
  return (JSON.parse(json) as { rows: ResultRow[] }).rows;
}

/** The revision to compare with: the one given, else the last commit that changed the results (HEAD's parent's if HEAD did and the file is unchanged since). */
function baseRevision(): string {
  const given = process.argv.slice(2).find((arg) => !arg.startsWith('--'));
  if (given) return given;
  const touched = git('log', '--format=%H', '-n', '2', '--', RESULTS).trim().split('\n');
  const changedSinceCommit = git('status', '--porcelain', '--', RESULTS).trim() !== '';
  return (changedSinceCommit ? touched[0] : touched[1]) ?? touched[0];
}

/** How a row moved: ops/s after ÷ before, or (no throughput) p50 before ÷ after. Above 1 is better. */
function move(before: ResultRow, after: ResultRow): number | null {
  if (before.opsPerSec && after.opsPerSec) return after.opsPerSec / before.opsPerSec;
  if (before.p50Ms && after.p50Ms) return before.p50Ms / after.p50Ms;
  return null;
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
};

const isLibrary = (row: ResultRow) =>
  row.implementation.startsWith('nest-pg-lease') ||
  row.implementation.startsWith('lease.') ||
  row.implementation.startsWith('@Exclusive');

function main(): void {
  const revision = baseRevision();
  const before = rowsOf(git('show', `${revision}:${RESULTS}`));
  const after = rowsOf(readFileSync(join(root, RESULTS), 'utf8'));
  const key = (row: ResultRow) => `${row.scenario} | ${row.implementation}`;
  const earlier = new Map(before.map((row) => [key(row), row]));
  const moves = new Map<string, number>();
  for (const row of after) {
    const old = earlier.get(key(row));
    const moved = old ? move(old, row) : null;
    if (moved !== null) moves.set(key(row), moved);
  }
  console.log(`bench/results/latest.json against ${revision.slice(0, 12)} (factor above 1: better)\n`);
  console.log('| scenario | implementation | moved | its baselines moved | relative | |');
  console.log('|---|---|---:|---:|---:|---|');
  let flagged = 0;
  for (const row of after) {
    const moved = moves.get(key(row));
    if (moved === undefined) {
      if (!earlier.has(key(row))) console.log(`| ${row.scenario} | ${row.implementation} | new | | | |`);
      continue;
    }
    if (!isLibrary(row)) continue;
    const baselines = after
      .filter((other) => other.scenario === row.scenario && !isLibrary(other))
      .map((other) => moves.get(key(other)))
      .filter((value): value is number => value !== undefined);
    const yardstick = baselines.length > 0 ? median(baselines) : 1;
    const relative = moved / yardstick;
    const worse = relative < 0.8;
    if (worse) flagged++;
    console.log(
      `| ${row.scenario} | ${row.implementation} | ${moved.toFixed(2)}× | ${baselines.length > 0 ? `${yardstick.toFixed(2)}×` : '—'} | ${relative.toFixed(2)}× | ${worse ? '**worse**' : ''} |`,
    );
  }
  const gone = before.filter((row) => !after.some((other) => key(other) === key(row)));
  for (const row of gone) console.log(`| ${row.scenario} | ${row.implementation} | gone | | | |`);
  console.log(`\n${flagged} library row(s) more than 20 % worse than their scenario's baselines moved.`);
}

main();
