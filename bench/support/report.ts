/** The printed table and the goals of issue 14, judged from the rows of one run. */
import { LEASE_IMPLEMENTATIONS } from '../scenarios/acquire-release.js';
import { CLIENTS, HANDOFF_SCENARIO } from '../scenarios/handoff.js';
import { EXCLUSIVE_SAVE, HTTP_WRITE_SCENARIO } from '../scenarios/http.js';
import { fixed, type Row } from './measure.js';

export function table(rows: Row[]): string {
  const header = [
    'scenario',
    'implementation',
    'ops/s',
    'p50 ms',
    'p99 ms',
    'RT/op',
    'xact/op',
    'WAL B/op',
    'dead/op',
    'HOT %',
    'CPU µs/op',
  ];
  const body = rows.map((row) => [
    row.scenario,
    row.implementation,
    fixed(row.opsPerSec, 0),
    fixed(row.p50Ms, 3),
    fixed(row.p99Ms, 3),
    fixed(row.roundTripsPerOp, 2),
    fixed(row.writeTransactionsPerOp, 2),
    fixed(row.walBytesPerOp, row.walBytesPerOp >= 1000 ? 0 : 1),
    fixed(row.deadTuplesPerOp, 2),
    row.hotShare === null ? '—' : fixed(row.hotShare * 100, 1),
    fixed(row.clientCpuUsPerOp, 0),
  ]);
  const widths = header.map((_, column) => Math.max(...[header, ...body].map((cells) => cells[column].length)));
  const line = (cells: string[]) =>
    `| ${cells.map((cell, column) => (column < 2 ? cell.padEnd(widths[column]) : cell.padStart(widths[column]))).join(' | ')} |`;
  const rule = `|${widths.map((width, column) => (column < 2 ? '-'.repeat(width + 2) : `${'-'.repeat(width + 1)}:`)).join('|')}|`;
  return [line(header), rule, ...body.map(line)].join('\n');
}

export interface Goal {
  goal: string;
  measured: string;
  met: boolean;
  /** The headline number of the goal, for the chart. */
  value: number;
  limit: number;
}

export function find(rows: Row[], scenario: string, implementation: string): Row | undefined {
  return rows.find((row) => row.scenario === scenario && row.implementation === implementation);
}

const LEASE = LEASE_IMPLEMENTATIONS.shipped;
const ADVISORY = 'advisory lock (pg_try_advisory_lock + unlock)';
const SEED = 'seed upsert + delete (raw SQL)';

/**
 * One line of issue 14's goals table: the figure for the library ("today": this branch, group commit on) and, where
 * it tells something, the same figure for the library with group commit off (`maxBatchSize: 1`), both from one run.
 */
export interface GoalRow {
  figure: string;
  goal: string;
  today: string;
  todayMet: boolean | null;
  comparison: string;
  comparisonMet: boolean | null;
  /** For the chart: today's headline number and the goal's limit. */
  value: number;
  limit: number;
}

type Judge = (value: number) => boolean;

function ratioRow(
  figure: string,
  goal: string,
  judge: Judge,
  limit: number,
  value: (impl: string) => number | undefined,
  text: (impl: string, ratio: number) => string,
  comparisons: string[],
): GoalRow | undefined {
  const today = value(LEASE);
  if (today === undefined || Number.isNaN(today)) return undefined;
  const candidates = comparisons
    .map((name) => ({ name, ratio: value(name) }))
    .filter((c): c is { name: string; ratio: number } => c.ratio !== undefined && !Number.isNaN(c.ratio));
  return {
    figure,
    goal,
    today: text(LEASE, today),
    todayMet: judge(today),
    comparison: candidates.map((c) => text(c.name, c.ratio)).join('; ') || '—',
    comparisonMet: candidates.length ? candidates.some((c) => judge(c.ratio)) : null,
    value: today,
    limit,
  };
}

/** Issue 14's goals, judged from the rows of one run. */
export function goalRows(rows: Row[]): GoalRow[] {
  const out: Array<GoalRow | undefined> = [];
  const comparisons = [LEASE_IMPLEMENTATIONS.unbatched];
  const short = (impl: string) => (impl === LEASE_IMPLEMENTATIONS.unbatched ? 'maxBatchSize 1' : '');
  for (const [clients, limit] of [
    [16, 0.5],
    [64, 1.0],
  ] as const) {
    const scenario = `acquire + release, ${clients} clients`;
    const base = find(rows, scenario, ADVISORY);
    out.push(
      ratioRow(
        `acquire + release throughput, ${clients} clients in one process, vs advisory lock`,
        `≥ ${limit.toFixed(1)}×`,
        (ratio) => ratio >= limit,
        limit,
        (impl) => {
          const row = find(rows, scenario, impl);
          return row?.opsPerSec && base?.opsPerSec ? row.opsPerSec / base.opsPerSec : undefined;
        },
        (impl, ratio) =>
          `${ratio.toFixed(2)}× (${fixed(find(rows, scenario, impl)?.opsPerSec, 0)} vs ${fixed(base?.opsPerSec, 0)}/s)` +
          (short(impl) ? ` ${short(impl)}` : ''),
        comparisons,
      ),
    );
  }
  const one = 'acquire + release, 1 client';
  const seedOne = find(rows, one, SEED);
  out.push(
    ratioRow(
      "1-client acquire + release p50 vs the seed's raw SQL",
      '≤ 1.1×',
      (ratio) => ratio <= 1.1,
      1.1,
      (impl) => {
        const row = find(rows, one, impl);
        return row && seedOne ? row.p50Ms / seedOne.p50Ms : undefined;
      },
      (impl, ratio) =>
        `${ratio.toFixed(2)}× (${fixed(find(rows, one, impl)?.p50Ms, 3)} vs ${fixed(seedOne?.p50Ms, 3)} ms)` +
        (short(impl) ? ` ${short(impl)}` : ''),
      comparisons,
    ),
  );
  for (const clients of [1, 16, 64]) {
    const scenario = `acquire + release, ${clients} client${clients > 1 ? 's' : ''}`;
    const seedRow = find(rows, scenario, SEED);
    out.push(
      ratioRow(
        `client CPU per acquire + release vs raw SQL, ${clients} client${clients > 1 ? 's' : ''}`,
        '≤ 1.2×',
        (ratio) => ratio <= 1.2,
        1.2,
        (impl) => {
          const row = find(rows, scenario, impl);
          return row && seedRow ? row.clientCpuUsPerOp / seedRow.clientCpuUsPerOp : undefined;
        },
        (impl, ratio) =>
          `${ratio.toFixed(2)}× (${fixed(find(rows, scenario, impl)?.clientCpuUsPerOp, 0)} vs ` +
          `${fixed(seedRow?.clientCpuUsPerOp, 0)} µs)${short(impl) ? ` ${short(impl)}` : ''}`,
        comparisons,
      ),
    );
  }
  out.push(
    ratioRow(
      `statements per handoff, 1 hot key, ${CLIENTS} clients`,
      '≤ 5',
      (value) => value <= 5,
      5,
      (impl) => find(rows, HANDOFF_SCENARIO, impl)?.roundTripsPerOp,
      (impl, value) => {
        const row = find(rows, HANDOFF_SCENARIO, impl);
        return `${value.toFixed(2)} (${fixed(row?.opsPerSec, 0)}/s, p50 ${fixed(row?.p50Ms, 2)} ms)`;
      },
      [],
    ),
  );
  const plainWrite = find(rows, HTTP_WRITE_SCENARIO, 'undecorated');
  out.push(
    ratioRow(
      '`@Exclusive` endpoint that writes a row vs the same endpoint undecorated',
      '≥ 60 %',
      (share) => share >= 0.6,
      0.6,
      (impl) => {
        const row = find(rows, HTTP_WRITE_SCENARIO, impl === LEASE ? '@Exclusive' : impl);
        return row?.opsPerSec && plainWrite?.opsPerSec ? row.opsPerSec / plainWrite.opsPerSec : undefined;
      },
      (impl, share) =>
        `${(share * 100).toFixed(0)} % (${fixed(find(rows, HTTP_WRITE_SCENARIO, impl === LEASE ? '@Exclusive' : impl)?.opsPerSec, 0)}` +
        ` vs ${fixed(plainWrite?.opsPerSec, 0)} req/s)`,
      [],
    ),
  );
  const saved = find(rows, HTTP_WRITE_SCENARIO, EXCLUSIVE_SAVE);
  if (saved?.opsPerSec && plainWrite?.opsPerSec) {
    const share = saved.opsPerSec / plainWrite.opsPerSec;
    out.push({
      figure:
        '`@Exclusive` endpoint whose fenced save releases the lease (one commit) vs the same endpoint undecorated',
      goal: '≥ 60 %',
      today: `${(share * 100).toFixed(0)} % (${fixed(saved.opsPerSec, 0)} vs ${fixed(plainWrite.opsPerSec, 0)} req/s)`,
      todayMet: share >= 0.6,
      comparison: '—',
      comparisonMet: null,
      value: share,
      limit: 0.6,
    });
  }
  const failed = find(rows, 'failed acquire on a held key', LEASE);
  if (failed) {
    out.push({
      figure: 'failed acquire on a held key: WAL bytes',
      goal: '0 (keep)',
      today: `${fixed(failed.walBytesPerOp, 2)} B, ${fixed(failed.writeTransactionsPerOp, 2)} write xact/attempt`,
      // Below one byte per attempt is background WAL of the server (checkpoints, running-xacts records), not ours.
      todayMet: failed.walBytesPerOp < 1 && failed.writeTransactionsPerOp === 0,
      comparison: '—',
      comparisonMet: null,
      value: failed.walBytesPerOp,
      limit: 0,
    });
  }
  const heartbeat = find(rows, 'heartbeat, 10,000 leases', LEASE);
  if (heartbeat) {
    const hot = heartbeat.hotShare ?? 0;
    // A tick whose renewal outlived its bound (heartbeatIntervalMs) fails and is retried by the next: its statement
    // (and the reconnect that follows a failure) counts, the tick does not.
    const failed = heartbeat.extra.failedTicks ?? 0;
    out.push({
      figure: 'heartbeat, 10,000 leases: statements per tick, HOT',
      goal: '1, 99.8 % (keep)',
      today:
        `${fixed(heartbeat.roundTripsPerOp, 2)} round trips per tick (one statement, no transaction around it; ` +
        `failed ticks per round ${fixed(failed, 1)}), ${fixed(hot * 100, 1)} % HOT, tick p50 ${fixed(heartbeat.p50Ms, 1)} ms`,
      todayMet: heartbeat.roundTripsPerOp <= 1.05 && hot >= 0.99,
      comparison: '—',
      comparisonMet: null,
      value: heartbeat.roundTripsPerOp,
      limit: 1,
    });
  }
  return out.filter((row): row is GoalRow => row !== undefined);
}

export function goalTable(list: GoalRow[]): string {
  const verdict = (met: boolean | null) => (met === null ? '—' : met ? 'met' : 'missed');
  return [
    '| figure (same run) | goal | nest-pg-lease | verdict | same, maxBatchSize 1 (no group commit) | verdict |',
    '|---|---|---|---|---|---|',
    ...list.map(
      (row) =>
        `| ${row.figure} | ${row.goal} | ${row.today} | ${verdict(row.todayMet)} | ${row.comparison} | ${verdict(row.comparisonMet)} |`,
    ),
  ].join('\n');
}

/** The goals in the chart's and the JSON's form (today's figures). */
export function goals(rows: Row[]): Goal[] {
  return goalRows(rows).map((row) => ({
    goal: `${row.figure} ${row.goal}`,
    measured: row.today,
    met: row.todayMet === true,
    value: row.value,
    limit: row.limit,
  }));
}

export function goalLines(list: Goal[]): string {
  return list.map((goal) => `${goal.met ? 'MET   ' : 'MISSED'}  ${goal.goal}: ${goal.measured}`).join('\n');
}
