/** The schedule's summary: one table row per run, printed and written to artifacts/fault-schedule/summary.md. */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { INVARIANTS } from './checker.js';
import type { RunResult } from './runner.js';
import { describeStep, FAULT_MIX, MODE_MIX, MODES_SHARE, RACEPOINTS, SCHEDULE_VERSION } from './schedule.js';

/** How a run is judged: an ordinary run (and a passing regression) must find nothing; a control must find its kind. */
export type Expectation = 'clean' | 'caught' | 'known-failure';

export interface JudgedRun {
  label: string;
  expectation: Expectation;
  result: RunResult;
  passed: boolean;
  verdict: string;
}

export function replayCommand(result: RunResult): string {
  const { seed, control, schedule } = result.spec;
  const version = schedule === undefined || schedule === SCHEDULE_VERSION ? '' : ` --schedule ${schedule}`;
  return `npm run test:schedule -- --seed ${seed} --steps ${result.records.length}${control ? ` --control ${control}` : ''}${version}`;
}

const s = (ms: number) => (ms / 1000).toFixed(1);

function known(result: RunResult): string {
  const n = result.violations.filter((v) => v.known).length;
  return n ? ` (${n} known)` : '';
}

function faultCell(result: RunResult): string {
  const f = result.faults;
  const stalled = result.records.filter((r) => r.step.kind === 'racepoint' && !/^no statement/.test(r.effect)).length;
  const handoffHits = result.records.filter((r) => r.step.kind === 'handoff-crash' && r.aim === 'hit').length;
  return [
    `kill ${f.sigkill}`,
    `stop ${f.sigstop}`,
    `backend ${f['backend-kill']}`,
    `delay ${f['proxy-delay']}`,
    `drop ${f['proxy-drop']}`,
    `blackhole ${f['proxy-blackhole']}`,
    `pg restart ${f['pg-restart']}`,
    `racepoint ${f.racepoint} (${stalled} stalled)`,
    `close ${f['close-restart']}`,
    `at sticky ${result.records.filter((r) => r.step.phase === 'sticky').length}`,
    `drain ${f.drain}`,
    `handoff crash ${f['handoff-crash']} (${handoffHits} stalled)`,
  ].join(' · ');
}

/**
 * Sticky calls that ran, joins by outcome (and how many each join check judged), grants handed over, takeovers, and
 * the read-write works, grants and writes judged.
 */
function modesCell(result: RunResult): string {
  const m = result.figures.modes;
  const joins = Object.entries(m.joins)
    .sort(([, a], [, b]) => b - a)
    .map(([outcome, n]) => `${outcome} ${n}`)
    .join(', ');
  const total = Object.values(m.joins).reduce((sum, n) => sum + n, 0);
  const { joinRuns, joinsDrained, takeovers } = m.judged;
  const rw = result.figures.readWrite;
  const length = result.figures.length;
  const asked = Object.entries(length.asked)
    .map(([ms, n]) => `${n} × ${ms} ms`)
    .join(', ');
  return `sticky ${m.stickyCalls} · joins ${total}${joins ? ` (${joins})` : ''}, judged: ${joinRuns} by their run, ${joinsDrained} in a drain · handoffs ${m.handoffs} (${m.confirmed} confirmed) · takeovers judged for local safety ${takeovers} · read-write works ${rw.works.shared} shared / ${rw.works.exclusive} exclusive, grants ${rw.grants.shared} / ${rw.grants.exclusive}, writes judged ${rw.writesJudged} · own lengths ${asked || 'none'}, length changes judged ${length.changesJudged}, takeovers judged by length ${length.takeovers} (${length.takeoversOfOwnLength} of an own length)`;
}

export function tableOf(runs: readonly JudgedRun[], totalMs: number): string {
  const rows = runs.map(({ label, result, verdict }) => {
    const { figures: fg } = result;
    const aimed = result.records.filter((r) => r.aim !== 'none');
    const hit = aimed.filter((r) => r.aim === 'hit').length;
    const caught = result.firstViolation
      ? ` (probe: step #${result.firstViolation.step}, ${s(result.firstViolation.atMs)} s)`
      : '';
    return `| ${label} | ${s(result.stepsMs / 60)} | ${result.records.length} | ${fg.operations} | ${fg.grants} (${fg.unreportedGrants}) | ${fg.writes.committed} / ${fg.writes.refused} / ${fg.writes.unknown} | ${fg.waits.total} (${Math.round(fg.waits.maxOvershootMs)} ms) | ${fg.priorityGrantsJudged} | ${fg.stalls.count} (${s(fg.stalls.maxMs)} s) | ${faultCell(result)} | ${modesCell(result)} | ${hit}/${aimed.length} | ${result.violations.length}${known(result)}${caught} | ${verdict} |`;
  });
  return [
    '| run | minutes of steps | steps | operations | grants (unreported) | fenced writes (committed / refused / unknown) | waits (most over bound) | grants judged for priority | event-loop stalls ≥ 250 ms (longest) | faults | modes | aimed (hit / all) | violations | result |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows,
    '',
    `Fault mix (weights): ${Object.entries(FAULT_MIX)
      .map(([kind, weight]) => `${kind} ${weight}`)
      .join(
        ', ',
      )}; racepoints: ${RACEPOINTS.join(', ')}; schedule ${SCHEDULE_VERSION}: ${MODES_SHARE * 100} % of the steps aim at the modes (${Object.entries(
      MODE_MIX,
    )
      .map(([mode, weight]) => `${mode} ${weight}`)
      .join(', ')}).`,
    `Wall time: ${s(totalMs)} s.`,
  ].join('\n');
}

/** The violations of a run by invariant, then the first ones, the steps that ran and the replay command. */
export function failureReport(run: JudgedRun): string {
  const { result } = run;
  const byInvariant = INVARIANTS.map(
    (inv) => [inv, result.violations.filter((v) => v.invariant === inv).length] as const,
  )
    .filter(([, n]) => n > 0)
    .map(([inv, n]) => `${inv}: ${n}`);
  return [
    `${run.label}: ${run.verdict}`,
    `  violations by invariant: ${byInvariant.join(', ') || 'none'}`,
    ...result.violations
      .slice(0, 15)
      .map(
        (v) =>
          `  - [${v.invariant}]${v.known ? ` [known: ${v.known}]` : ''} ${v.detail}${v.step === undefined ? '' : ` (step #${v.step})`}`,
      ),
    ...(result.violations.length > 15 ? [`  … and ${result.violations.length - 15} more`] : []),
    ...result.harnessErrors.map((e) => `  harness error: ${e}`),
    `  the schedule (seed ${result.spec.seed}${result.spec.control ? `, control ${result.spec.control}` : ''}):`,
    ...result.records.map((r) => `    ${describeStep(r.step)} → ${r.aim === 'none' ? '' : `${r.aim}; `}${r.effect}`),
    `  replay: ${replayCommand(result)}`,
  ].join('\n');
}

export const ARTIFACT_DIR = join(process.cwd(), 'artifacts', 'fault-schedule');

export function writeSummary(runs: readonly JudgedRun[], totalMs: number): string {
  const table = tableOf(runs, totalMs);
  const failures = runs.filter((r) => !r.passed || r.result.violations.length > 0).map(failureReport);
  const worst = runs.map((r) => `- ${r.label}:\n${r.result.figures.waits.worst.map((w) => `  - ${w}`).join('\n')}`);
  mkdirSync(ARTIFACT_DIR, { recursive: true });
  writeFileSync(
    join(ARTIFACT_DIR, 'summary.md'),
    `# Fault schedule\n\n${table}\n\n## The waits that overshot their bound most\n\n${worst.join('\n')}\n${failures.length ? `\n## Violations and schedules\n\n\`\`\`\n${failures.join('\n\n')}\n\`\`\`\n` : ''}`,
  );
  writeFileSync(
    join(ARTIFACT_DIR, 'runs.json'),
    JSON.stringify(
      runs.map(({ label, expectation, passed, verdict, result }) => ({
        label,
        expectation,
        passed,
        verdict,
        ...result,
      })),
      null,
      2,
    ),
  );
  return table;
}
