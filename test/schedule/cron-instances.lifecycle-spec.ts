/**
 * Issue 12, items 4–6: three app instances (three processes, each with its own LeaseService) run
 * `@Cron('* * * * * *')` + `@Exclusive(key, { holdAtLeastMs, onBusy: 'skip' })`, their clocks skewed by 0, 150 and
 * 300 ms, with `ScheduleModule` imported before and after `LeaseModule`. Every tick second has exactly one row, every
 * row carries a fencing token, and no instance logs an error or a warning.
 */
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { startService, useTestDatabase } from '../support/db.js';
import { startChild } from '../support/processes.js';

const SKEWS_MS = [0, 150, 300];
/** Longer than the skew spread plus timer jitter, shorter than the period minus that jitter. */
const HOLD_AT_LEAST_MS = 650;
const RUN_MS = 10_000;
const CHILD = join(process.cwd(), 'test/schedule/cron-instance.ts');

interface Instance {
  child: ChildProcess;
  output: string[];
  ready: Promise<void>;
  stopped: Promise<{ problems: Array<{ level: string; message: string }>; skipped: number[] }>;
}

function startInstance(config: Record<string, unknown>): Instance {
  const child = startChild(CHILD, { CRON_INSTANCE: config }, { captureOutput: true });
  return {
    child: child.process,
    output: child.output,
    ready: child.message('ready').then(() => undefined),
    stopped: child.message<{ problems: Array<{ level: string; message: string }>; skipped: number[] }>('stopped'),
  };
}

interface Row {
  tick_second: string;
  fencing_token: string | null;
  instance: string;
}

describe('three instances, one @Cron job, one run per tick', () => {
  const db = useTestDatabase('cron');
  const children: ChildProcess[] = [];
  const report: string[] = [];

  beforeAll(async () => {
    // The lease tables, made once (three instances creating them at once would race on the catalog).
    const schema = await startService(db.url);
    await schema.close();
  });

  db.beforeDrop(async () => {
    for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
    console.log(report.join('\n'));
  });

  for (const order of ['schedule-first', 'lease-first'] as const) {
    test(`ScheduleModule ${order === 'schedule-first' ? 'before' : 'after'} LeaseModule, clocks skewed ${SKEWS_MS.join('/')} ms`, async () => {
      const table = `cron_runs_${order.replace('-', '_')}`;
      await db.admin.query(
        `CREATE TABLE ${table} (
          tick_second bigint NOT NULL, fencing_token bigint, instance text NOT NULL, real_ms bigint NOT NULL)`,
      );
      const instances = SKEWS_MS.map((skewMs, i) => {
        const instance = startInstance({
          url: db.url,
          name: `i${i}+${skewMs}ms`,
          skewMs,
          order,
          key: `cron:${order}`,
          table,
          holdAtLeastMs: HOLD_AT_LEAST_MS,
        });
        children.push(instance.child);
        return instance;
      });
      await Promise.all(instances.map((instance) => instance.ready));
      const from = Math.ceil(Date.now() / 1000) + 1;
      await new Promise((resolve) => setTimeout(resolve, RUN_MS));
      const to = Math.floor(Date.now() / 1000) - 1;
      instances.forEach((instance) => instance.child.send('stop'));
      const stopped = await Promise.all(instances.map((instance) => instance.stopped));
      const problems = stopped.flatMap((instance) => instance.problems);
      const skippedBy = (second: number) =>
        stopped.flatMap((instance, i) => (instance.skipped.includes(second) ? [`i${i}+${SKEWS_MS[i]}ms`] : []));

      const { rows } = await db.admin.query<Row>(
        `SELECT tick_second::text, fencing_token::text, instance FROM ${table} ORDER BY tick_second, real_ms`,
      );
      const bySecond = new Map<number, Row[]>();
      for (const row of rows)
        bySecond.set(Number(row.tick_second), [...(bySecond.get(Number(row.tick_second)) ?? []), row]);
      const window = Array.from({ length: to - from + 1 }, (_, i) => from + i);
      const inWindow = window.map((second) => bySecond.get(second) ?? []);
      const duplicates = [...bySecond.values()].filter((runs) => runs.length > 1).length;
      const unleased = rows.filter((row) => row.fencing_token === null).length;
      const missing = inWindow.filter((runs) => runs.length === 0).length;
      const errors = problems.filter((problem) => problem.level !== 'warn').length;

      report.push(
        `\n${order}: ticks ${window.length}, rows ${inWindow.flat().length}, duplicates ${duplicates}, ` +
          `unleased ${unleased}, missing ${missing}, errors ${errors}, warnings ${problems.length - errors} ` +
          `(skews ${SKEWS_MS.join('/')} ms, holdAtLeastMs ${HOLD_AT_LEAST_MS})`,
        '  tick second | runs (instance: fencing token) | skipped (busy)',
        ...[...bySecond.entries()].map(
          ([second, runs]) =>
            `  ${second}${window.includes(second) ? ' ' : '*'} | ` +
            `${runs.map((run) => `${run.instance}: ${run.fencing_token ?? 'NONE'}`).join(', ')} | ` +
            skippedBy(second).join(', '),
        ),
        '  (* outside the window in which all three instances ran)',
      );

      expect(window.length).toBeGreaterThanOrEqual(RUN_MS / 1000 - 3);
      expect({ duplicates, unleased, missing }).toEqual({ duplicates: 0, unleased: 0, missing: 0 });
      expect(problems).toEqual([]);
      // Fencing tokens only grow from tick to tick.
      const tokens = rows.map((row) => BigInt(row.fencing_token ?? -1));
      expect(tokens).toEqual([...tokens].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
    }, 120_000);
  }
});
