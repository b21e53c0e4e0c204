/** The headline ratios as a plain SVG: one panel per goal, bars per implementation, the goal as a dashed line. */
import { LEASE_IMPLEMENTATIONS } from '../scenarios/acquire-release.js';
import { HANDOFF_SCENARIO } from '../scenarios/handoff.js';
import { HTTP_SCENARIO, HTTP_WRITE_SCENARIO } from '../scenarios/http.js';
import { PRIORITY_SCENARIO } from '../scenarios/priority.js';
import type { Row } from './measure.js';
import { find, type Goal } from './report.js';

interface Bar {
  label: string;
  value: number;
  text: string;
  ours?: boolean;
}

interface Panel {
  title: string;
  bars: Bar[];
  goal?: { value: number; label: string };
  log?: boolean;
}

const WIDTH = 960;
const LABEL_WIDTH = 360;
const PLOT_WIDTH = 430;
const BAR_HEIGHT = 16;
const BAR_GAP = 6;

const escape = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function panels(rows: Row[]): Panel[] {
  const out: Panel[] = [];
  const isOurs = (implementation: string) => implementation.startsWith('nest-pg-lease');
  for (const [clients, goal] of [
    [16, 0.5],
    [64, 1.0],
  ] as const) {
    const scenario = `acquire + release, ${clients} clients`;
    const base = find(rows, scenario, 'advisory lock (pg_try_advisory_lock + unlock)');
    const bars = rows
      .filter((row) => row.scenario === scenario && base?.opsPerSec && row.opsPerSec)
      .map((row) => ({
        label: row.implementation,
        value: row.opsPerSec! / base!.opsPerSec!,
        text: `${(row.opsPerSec! / base!.opsPerSec!).toFixed(2)}× (${Math.round(row.opsPerSec!)}/s)`,
        ours: isOurs(row.implementation),
      }));
    if (bars.length)
      out.push({
        title: `${scenario}: throughput ÷ advisory lock + unlock`,
        bars,
        goal: { value: goal, label: `goal ≥ ${goal}×` },
      });
  }
  const one = 'acquire + release, 1 client';
  const seedOne = find(rows, one, 'seed upsert + delete (raw SQL)');
  const oneBars = rows
    .filter((row) => row.scenario === one && seedOne && row.implementation !== seedOne.implementation)
    .map((row) => ({
      label: row.implementation,
      value: row.p50Ms / seedOne!.p50Ms,
      text: `${(row.p50Ms / seedOne!.p50Ms).toFixed(2)}× (${row.p50Ms.toFixed(3)} ms)`,
      ours: isOurs(row.implementation),
    }));
  if (oneBars.length)
    out.push({
      title: `${one}: p50 latency ÷ the seed's raw SQL`,
      bars: oneBars,
      goal: { value: 1.1, label: 'goal ≤ 1.1×' },
    });
  const failed = rows.filter((row) => row.scenario === 'failed acquire on a held key');
  if (failed.length) {
    out.push({
      title: 'failed acquire on a held key: WAL bytes per refused attempt',
      bars: failed.map((row) => ({
        label: row.implementation,
        value: row.walBytesPerOp,
        text: `${row.walBytesPerOp.toFixed(1)} B`,
        ours: isOurs(row.implementation),
      })),
      goal: { value: 0, label: 'goal 0 B' },
    });
  }
  const heartbeat = rows.filter((row) => row.scenario.startsWith('heartbeat') && row.hotShare !== null);
  if (heartbeat.length) {
    out.push({
      title: 'heartbeat: HOT share of the updates (statements per tick in brackets)',
      bars: heartbeat.map((row) => ({
        label: `${row.implementation}, ${row.scenario.replace('heartbeat, ', '')}`,
        value: row.hotShare! * 100,
        text: `${(row.hotShare! * 100).toFixed(1)} % (${Math.round(row.roundTripsPerOp).toLocaleString('en-US')} stmt/tick)`,
        ours: isOurs(row.implementation),
      })),
      goal: { value: 90, label: 'goal ≥ 90 %' },
    });
  }
  const handoffs = rows.filter((row) => row.scenario === HANDOFF_SCENARIO || row.scenario === PRIORITY_SCENARIO);
  if (handoffs.length) {
    out.push({
      title: 'handoff: release → grant p50, ms (log scale); 1 hot key, 8 clients unless said',
      bars: handoffs.map((row) => ({
        label:
          row.scenario === PRIORITY_SCENARIO ? `${row.implementation}, 2 processes, waiter asleep` : row.implementation,
        value: row.p50Ms,
        text: `${row.p50Ms < 10 ? row.p50Ms.toFixed(2) : row.p50Ms.toFixed(0)} ms${row.opsPerSec ? `, ${Math.round(row.opsPerSec)}/s` : ''}`,
        ours: isOurs(row.implementation),
      })),
      goal: { value: 5, label: 'goal ≤ 5 ms' },
      log: true,
    });
  }
  const handoffRows = rows.filter((row) => row.scenario === HANDOFF_SCENARIO);
  if (handoffRows.length) {
    out.push({
      title: 'handoff, 1 hot key, 8 clients: statements per handoff',
      bars: handoffRows.map((row) => ({
        label: row.implementation,
        value: row.roundTripsPerOp,
        text: row.roundTripsPerOp.toFixed(2),
        ours: isOurs(row.implementation),
      })),
      goal: { value: 5, label: 'goal ≤ 5' },
    });
  }
  const http: Bar[] = [];
  for (const [scenario, handler] of [
    [HTTP_SCENARIO, 'handler returns at once'],
    [HTTP_WRITE_SCENARIO, 'handler writes a row'],
  ]) {
    const plain = find(rows, scenario, 'undecorated');
    if (!plain?.opsPerSec) continue;
    for (const row of rows.filter((candidate) => candidate.scenario === scenario && candidate.opsPerSec)) {
      const share = (row.opsPerSec! / plain.opsPerSec) * 100;
      http.push({
        label: `${handler}: ${row.implementation}`,
        value: share,
        text: `${share.toFixed(0)} % (${Math.round(row.opsPerSec!)} req/s)`,
        ours: row !== plain,
      });
    }
  }
  if (http.length) {
    out.push({
      title: 'HTTP endpoint throughput, % of the same endpoint undecorated',
      bars: http,
      goal: { value: 60, label: 'goal ≥ 60 % (writes a row)' },
    });
  }
  return out;
}

function drawPanel(panel: Panel, top: number): { svg: string; height: number } {
  const values = [...panel.bars.map((bar) => bar.value), panel.goal?.value ?? 0];
  const max = Math.max(...values) * 1.05 || 1;
  const min = panel.log ? Math.max(0.01, Math.min(...values.filter((v) => v > 0)) / 2) : 0;
  const x = (value: number) =>
    panel.log
      ? (PLOT_WIDTH * Math.log(Math.max(value, min) / min)) / Math.log(max / min)
      : (PLOT_WIDTH * Math.max(0, value)) / max;
  const parts = [`<text x="16" y="${top + 16}" class="title">${escape(panel.title)}</text>`];
  const barsTop = top + 28;
  panel.bars.forEach((bar, i) => {
    const y = barsTop + i * (BAR_HEIGHT + BAR_GAP);
    const width = Math.max(1, x(bar.value));
    parts.push(
      `<text x="${LABEL_WIDTH - 8}" y="${y + 12}" class="label" text-anchor="end">${escape(bar.label)}</text>`,
      `<rect x="${LABEL_WIDTH}" y="${y}" width="${width.toFixed(1)}" height="${BAR_HEIGHT}" class="${bar.ours ? 'ours' : 'other'}"/>`,
      `<text x="${(LABEL_WIDTH + width + 6).toFixed(1)}" y="${y + 12}" class="value">${escape(bar.text)}</text>`,
    );
  });
  const plotHeight = panel.bars.length * (BAR_HEIGHT + BAR_GAP);
  if (panel.goal) {
    const gx = LABEL_WIDTH + x(panel.goal.value);
    parts.push(
      `<line x1="${gx.toFixed(1)}" y1="${barsTop - 4}" x2="${gx.toFixed(1)}" y2="${barsTop + plotHeight + 2}" class="goal"/>`,
      `<text x="${(gx + 4).toFixed(1)}" y="${barsTop + plotHeight + 10}" class="goal-label">${escape(panel.goal.label)}</text>`,
    );
  }
  return { svg: parts.join('\n'), height: 28 + plotHeight + 24 };
}

export function chart(
  rows: Row[],
  goals: Goal[],
  meta: {
    generatedAt: string;
    mode: string;
    server: { version: string; source: string };
    durableCommitP50Ms: { start: number; end: number };
  },
): string {
  let top = 48;
  const body: string[] = [];
  for (const panel of panels(rows)) {
    const drawn = drawPanel(panel, top);
    body.push(drawn.svg);
    top += drawn.height;
  }
  const met = goals.filter((goal) => goal.met).length;
  const footer = [
    `${met} of ${goals.length} goals met. ${meta.mode} run, ${meta.generatedAt.slice(0, 16).replace('T', ' ')} UTC; medians of interleaved rounds; one durable commit p50 ${meta.durableCommitP50Ms.start.toFixed(2)} → ${meta.durableCommitP50Ms.end.toFixed(2)} ms.`,
    `${meta.server.version.split(' on ')[0]} (${meta.server.source}); blue: ${LEASE_IMPLEMENTATIONS.shipped} and its variants, grey: baselines.`,
  ];
  const height = top + 44;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="system-ui, sans-serif">
<style>
.title { font-size: 13px; font-weight: 600; fill: #222; }
.label { font-size: 11px; fill: #333; }
.value { font-size: 11px; fill: #333; }
.ours { fill: #2f6fdf; }
.other { fill: #9aa3ad; }
.goal { stroke: #d43; stroke-width: 1.5; stroke-dasharray: 4 3; }
.goal-label { font-size: 10px; fill: #d43; }
.note { font-size: 10px; fill: #666; }
</style>
<rect width="100%" height="100%" fill="#fff"/>
<text x="16" y="26" font-size="16" font-weight="700" fill="#111">nest-pg-lease benchmarks: headline ratios</text>
${body.join('\n')}
<text x="16" y="${top + 14}" class="note">${escape(footer[0])}</text>
<text x="16" y="${top + 30}" class="note">${escape(footer[1])}</text>
</svg>
`;
}
