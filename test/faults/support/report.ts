/**
 * The suite's summary table: each scenario appends one row to artifacts/faults/summary.jsonl (test files run in
 * separate module registries, so a file is the simplest shared place); global-teardown.js prints it as a table.
 */
import { appendFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

const DIR = join(process.cwd(), 'artifacts', 'faults');

export interface ScenarioRow {
  scenario: string;
  faults: string;
  /** Committed fenced writes checked, and attempts the fence refused: "committed / refused". */
  writes: string;
  violations: number;
  takeoverMs?: string;
  wallMs: number;
}

export function recordScenario(row: ScenarioRow): void {
  mkdirSync(DIR, { recursive: true });
  appendFileSync(join(DIR, 'summary.jsonl'), `${JSON.stringify(row)}\n`);
  console.log(
    `[faults] ${row.scenario}: ${row.faults}; writes ${row.writes}; violations ${row.violations}${row.takeoverMs ? `; takeover ${row.takeoverMs} ms` : ''}; ${(row.wallMs / 1000).toFixed(1)} s`,
  );
}
