/**
 * `npm run test:schedule -- [options]`: the randomized fault schedule (see README.md in this folder).
 *
 *   --seed N            the schedule (default 1)
 *   --minutes M         run steps for M minutes (default 1; fractions allowed)
 *   --steps K           run exactly K steps instead (a replay: what a failure prints)
 *   --control C         a negative control: fence-off | token-before-lock | sticky-overlap | multi-skip-last |
 *                       rw-reader-beside-writer | renew-one-length (must be caught)
 *   --schedule V        draw the steps of SCHEDULE_VERSION V (a seed kept with an older version; default the current)
 *   --keep-going        go on after the probe finds a violation
 *   --dry-run           print the steps of the seed (K of them, default 20) and exit
 *   --regressions       the seeds kept in regressions.json
 *   --ci                the CI budget: CI_SEEDS, the regressions that must pass, both controls
 *
 * One PostgreSQL for the whole invocation (DATABASE_URL, or an embedded one that `pg-restart` steps restart), a
 * fresh database per run. Exits 1 when a run that must be clean found a violation, a control was not caught, or
 * the harness failed.
 */
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { startPostgres } from '@app/pg-harness';
import { LEASE } from '../faults/support/harness.js';
import type { Invariant } from './checker.js';
import { ARTIFACT_DIR, failureReport, writeSummary, type Expectation, type JudgedRun } from './report.js';
import { CONTROLS, ScheduleRun, WORKERS, type Control, type RunResult, type RunSpec } from './runner.js';
import { describeStep, SCHEDULE_VERSION, stepOf } from './schedule.js';

/**
 * CI: these seeds for CI_MINUTES each, then the regressions that must pass (per seed the longest replay: a shorter
 * one is its prefix), then each control for at most CONTROL_MINUTES (a control stops at its catch). Known failures
 * are left to `--regressions`: they cannot fail a run, and each has a deterministic test in known-defects.e2e-spec.ts.
 */
/**
 * Seed 1772 mixes every mode in its first steps under schedule 3 (--dry-run): sticky-aimed faults, drains, both
 * handoff crashes, racepoints, and pauses, an outage and a kill aimed at leases with a length of their own.
 */
const CI_SEEDS = [1772];
const CI_MINUTES = 0.6;
const CONTROL_MINUTES = 1.5;
/** CI replays kept seeds of at most this many steps (a long run's seed is replayed by `--regressions`). */
const CI_MAX_REPLAY_STEPS = 20;
/**
 * The seed each control runs in CI: one whose first steps are the faults it needs (seed 20: a holder SIGSTOPped 3.6 s
 * at step #0; seed 134: acquire-insert racepoints at steps #0 and #1, found with --dry-run under schedule 2), so the
 * catch takes seconds, not a minute, on a loaded machine. Any seed catches them in time (seed 1: 5-60 s). The sticky
 * control needs no fault: its owner's calls overlap from its first ticks (caught by the probe after step #0).
 */
/**
 * A control not caught on its seed runs once more on this one, and fails CI only if not caught there either: a catch
 * needs a race between workers (token-before-lock: another grant of the key while the first insert stalls), and seed
 * 134 once ran 92 s of steps without one (2026-12-05, one CI run in nine).
 */
const CONTROL_RETRY_SEED = 1;
const CONTROL_SEEDS: Readonly<Record<Control, number>> = {
  'fence-off': 20,
  'token-before-lock': 134,
  'sticky-overlap': 2,
  'multi-skip-last': 2,
  'rw-reader-beside-writer': 2,
  'renew-one-length': 2,
};
/** The invariant each control must trip. */
const CAUGHT_BY: Readonly<Record<Control, Invariant>> = {
  'fence-off': 'fenced exclusion',
  'token-before-lock': 'tokens rising per key',
  'sticky-overlap': 'sticky: one call at a time',
  'multi-skip-last': 'multi-key: no two holders overlap on a key',
  'rw-reader-beside-writer': 'read-write: a writer overlaps no other holder',
  'renew-one-length': 'lease length: each lease its own',
};

interface Regression {
  /** The SCHEDULE_VERSION it was found with: under another version its seed draws other steps. */
  schedule: number;
  seed: number;
  steps: number;
  minutes: number;
  control?: Control;
  /** What it found, when, and what was done about it. */
  found: string;
  /** `passing`: it must stay clean; `known-failure`: a library defect reported and not yet fixed. */
  status: 'passing' | 'known-failure';
  /**
   * A known failure's violations: their invariant and a pattern of their text. While the entry is a known failure,
   * violations matching it are reported as known in every run instead of failing it (they show in the table); flip
   * the status to `passing` once the library is fixed and they fail runs again.
   */
  defect?: { invariant: Invariant; match: string };
}

type KnownDefects = Array<{ id: string; invariant: Invariant; match: RegExp }>;

const REGRESSIONS = join(process.cwd(), 'test', 'fault-schedule', 'regressions.json');

function argument(name: string): string | undefined {
  const at = process.argv.indexOf(`--${name}`);
  if (at < 0) return undefined;
  const value = process.argv[at + 1];
  if (value === undefined || value.startsWith('--')) throw new Error(`--${name} needs a value`);
  return value;
}

function numberArgument(name: string): number | undefined {
  const text = argument(name);
  if (text === undefined) return undefined;
  const value = Number(text);
  if (!Number.isFinite(value) || value < 0) throw new Error(`--${name} must be a non-negative number, not ${text}`);
  return value;
}

const flag = (name: string) => process.argv.includes(`--${name}`);

function controlArgument(): Control | undefined {
  const control = argument('control');
  if (control !== undefined && !(CONTROLS as readonly string[]).includes(control)) {
    throw new Error(`--control must be one of ${CONTROLS.join(', ')}, not ${control}`);
  }
  return control as Control | undefined;
}

function judge(label: string, expectation: Expectation, result: RunResult, known: KnownDefects): JudgedRun {
  const harness = result.harnessErrors.length > 0;
  for (const v of result.violations)
    v.known = known.find((d) => d.invariant === v.invariant && d.match.test(v.detail))?.id;
  const n = result.violations.filter((v) => !v.known).length;
  const tolerated = result.violations.length - n;
  const also = tolerated ? `; ${tolerated} known` : '';
  if (expectation === 'caught') {
    const wanted = CAUGHT_BY[result.spec.control!];
    const caught = result.violations.filter((v) => v.invariant === wanted).length;
    const at = result.firstViolation ? `${(result.firstViolation.atMs / 1000).toFixed(1)} s` : 'the final check';
    return {
      label,
      expectation,
      result,
      passed: caught > 0 && !harness,
      verdict: caught ? `caught: ${caught} × ${wanted}, first at ${at}` : `NOT CAUGHT (${n} other violations${also})`,
    };
  }
  if (expectation === 'known-failure') {
    return {
      label,
      expectation,
      result,
      passed: !harness,
      verdict: tolerated
        ? `known failure, reproduced (${tolerated} violations${n ? `, and ${n} others` : ''})`
        : `known failure, not reproduced this time${n ? ` (${n} other violations)` : ''}`,
    };
  }
  return {
    label,
    expectation,
    result,
    passed: n === 0 && !harness,
    verdict: harness ? 'HARNESS ERROR' : n ? `FAILED (${n} violations${also})` : `passed${also}`,
  };
}

async function main(): Promise<void> {
  const seed = numberArgument('seed') ?? 1;
  const steps = numberArgument('steps');
  const schedule = numberArgument('schedule');
  const control = controlArgument();
  if (flag('dry-run')) {
    const shape = { workers: WORKERS, leaseTimeoutMs: LEASE.timing!.leaseTimeoutMs! };
    for (let index = 0; index < (steps ?? 20); index++) console.log(describeStep(stepOf(seed, index, shape, schedule)));
    return;
  }
  const plan: Array<{ label: string; expectation: Expectation; spec: RunSpec }> = [];
  const kept = JSON.parse(readFileSync(REGRESSIONS, 'utf8')) as Regression[];
  const known: KnownDefects = kept.flatMap((r) =>
    r.status === 'known-failure' && r.defect
      ? [{ id: `seed ${r.seed}`, invariant: r.defect.invariant, match: new RegExp(r.defect.match) }]
      : [],
  );
  const regressions = () =>
    kept.map((r): { label: string; expectation: Expectation; spec: RunSpec } => ({
      label: `regression seed ${r.seed}${r.control ? ` (${r.control})` : ''}${r.schedule === SCHEDULE_VERSION ? '' : ` (schedule ${r.schedule})`}`,
      expectation: r.status === 'known-failure' ? 'known-failure' : r.control ? 'caught' : 'clean',
      spec: { seed: r.seed, steps: r.steps, control: r.control, schedule: r.schedule },
    }));
  if (flag('ci')) {
    for (const s of CI_SEEDS)
      plan.push({ label: `seed ${s}`, expectation: 'clean', spec: { seed: s, minutes: CI_MINUTES } });
    // Per seed (and control) the longest kept replay only: a shorter one of the same seed is its prefix.
    const longest = new Map<string, (typeof plan)[number]>();
    const replays = regressions().filter(
      (entry) => entry.expectation !== 'known-failure' && entry.spec.steps! <= CI_MAX_REPLAY_STEPS,
    );
    for (const r of replays) {
      const key = `${r.spec.seed}/${r.spec.control ?? ''}`;
      if ((longest.get(key)?.spec.steps ?? -1) < r.spec.steps!) longest.set(key, r);
    }
    plan.push(...longest.values());
    for (const c of CONTROLS) {
      plan.push({
        label: `control ${c}`,
        expectation: 'caught',
        spec: { seed: CONTROL_SEEDS[c], minutes: CONTROL_MINUTES, control: c },
      });
    }
  } else if (flag('regressions')) {
    plan.push(...regressions());
  } else {
    const minutes = numberArgument('minutes') ?? 1;
    plan.push({
      label: `seed ${seed}${control ? ` control ${control}` : ''}`,
      expectation: control ? 'caught' : 'clean',
      spec: {
        seed,
        minutes: steps === undefined ? minutes : undefined,
        steps,
        control,
        schedule,
        keepGoing: flag('keep-going'),
      },
    });
  }

  const startedAt = performance.now();
  rmSync(join(ARTIFACT_DIR, 'runs'), { recursive: true, force: true });
  const server = await startPostgres();
  const judged: JudgedRun[] = [];
  try {
    for (let i = 0; i < plan.length; i++) {
      const { label, expectation, spec } = plan[i];
      const budget = spec.steps === undefined ? `${spec.minutes} min` : `${spec.steps} steps`;
      console.log(
        `[schedule] ${label}: ${budget}, ${WORKERS} workers${spec.control ? `, control ${spec.control}` : ''}`,
      );
      const artifacts = join(ARTIFACT_DIR, 'runs', `${judged.length + 1}-${label.replace(/[^a-z0-9]+/gi, '-')}`);
      const result = await new ScheduleRun(spec, server, artifacts).run();
      const run = judge(label, expectation, result, known);
      judged.push(run);
      console.log(`[schedule] ${label}: ${run.verdict} (${(result.wallMs / 1000).toFixed(1)} s)`);
      if (result.figures.waits.worst[0])
        console.log(`  the wait most over its bound: ${result.figures.waits.worst[0]}`);
      if (!run.passed || (expectation === 'clean' && result.violations.length)) console.log(failureReport(run));
      if (!run.passed && flag('ci') && spec.control && !spec.retry && result.harnessErrors.length === 0) {
        // Judged as missed above; the run fails only if the retry misses too (see CONTROL_RETRY_SEED).
        run.passed = true;
        run.verdict += ` — retried on seed ${CONTROL_RETRY_SEED}`;
        plan.splice(i + 1, 0, {
          label: `${label} (retry)`,
          expectation,
          spec: { ...spec, seed: CONTROL_RETRY_SEED, retry: true },
        });
      }
    }
  } finally {
    await server.destroy();
  }
  const table = writeSummary(judged, performance.now() - startedAt);
  console.log(`\nFault schedule summary (also in artifacts/fault-schedule/summary.md)\n\n${table}\n`);
  if (judged.some((run) => !run.passed)) process.exitCode = 1;
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
