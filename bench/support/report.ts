/** The printed table and the goals of issue 7, judged from the rows of one run. */
import { LEASE_IMPLEMENTATIONS } from '../scenarios/acquire-release.js';
import { HANDOFF_SCENARIO, VERROU_HANDOFF } from '../scenarios/handoff.js';
import { HTTP_SCENARIO } from '../scenarios/http.js';
import { fixed, type Row } from './measure.js';

export function table(rows: Row[]): string {
  const header = ['scenario', 'implementation', 'ops/s', 'p50 ms', 'p99 ms', 'RT/op', 'xact/op', 'WAL B/op', 'dead/op', 'HOT %', 'CPU µs/op'];
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

export function goals(rows: Row[]): Goal[] {
  const out: Goal[] = [];
  for (const clients of ['1 client', '16 clients']) {
    const lease = find(rows, `acquire + release, ${clients}`, LEASE);
    const base = find(rows, `acquire + release, ${clients}`, ADVISORY);
    if (lease && base) {
      const ratio = lease.p50Ms / base.p50Ms;
      out.push({
        goal: `acquire + release p50 ≤ 1.5 × advisory (${clients})`,
        measured: `${fixed(lease.p50Ms, 3)} ms vs ${fixed(base.p50Ms, 3)} ms = ${fixed(ratio, 2)}×`,
        met: ratio <= 1.5,
        value: ratio,
        limit: 1.5,
      });
    }
  }
  const failed = find(rows, 'failed acquire on a held key', LEASE);
  if (failed) {
    out.push({
      goal: 'failed acquire on a held key writes 0 WAL bytes',
      measured: `${fixed(failed.walBytesPerOp, 2)} B/attempt, ${fixed(failed.writeTransactionsPerOp, 2)} write transactions/attempt`,
      // Below one byte per attempt is background WAL of the server (checkpoints, running-xacts records), not ours.
      met: failed.walBytesPerOp < 1 && failed.writeTransactionsPerOp === 0,
      value: failed.walBytesPerOp,
      limit: 0,
    });
  }
  const heartbeat = find(rows, 'heartbeat, 10,000 leases', LEASE);
  if (heartbeat) {
    const hot = heartbeat.hotShare ?? 0;
    out.push({
      goal: '10,000 leases: 1 heartbeat statement per tick per process',
      measured: `${fixed(heartbeat.roundTripsPerOp, 2)} statements/tick, tick p50 ${fixed(heartbeat.p50Ms, 1)} ms`,
      met: heartbeat.roundTripsPerOp === 1,
      value: heartbeat.roundTripsPerOp,
      limit: 1,
    });
    out.push({
      goal: '10,000 leases: ≥ 90 % HOT updates',
      measured: `${fixed(hot * 100, 1)} % HOT`,
      met: hot >= 0.9,
      value: hot * 100,
      limit: 90,
    });
  }
  const handoff = find(rows, HANDOFF_SCENARIO, LEASE);
  const verrou = find(rows, HANDOFF_SCENARIO, VERROU_HANDOFF);
  if (handoff && verrou) {
    out.push({
      goal: 'handoff p50 ≤ 5 ms and faster than @verrou/core',
      measured: `${fixed(handoff.p50Ms, 2)} ms (${fixed(handoff.opsPerSec, 0)}/s) vs verrou ${fixed(verrou.p50Ms, 1)} ms (${fixed(verrou.opsPerSec, 1)}/s)`,
      met: handoff.p50Ms <= 5 && handoff.p50Ms < verrou.p50Ms && (handoff.opsPerSec ?? 0) > (verrou.opsPerSec ?? 0),
      value: handoff.p50Ms,
      limit: 5,
    });
  }
  const exclusive = find(rows, HTTP_SCENARIO, '@Exclusive');
  const plain = find(rows, HTTP_SCENARIO, 'undecorated');
  if (exclusive && plain && exclusive.opsPerSec && plain.opsPerSec) {
    const share = exclusive.opsPerSec / plain.opsPerSec;
    out.push({
      goal: '@Exclusive endpoint ≥ 50 % of undecorated throughput',
      measured: `${fixed(exclusive.opsPerSec, 0)} vs ${fixed(plain.opsPerSec, 0)} req/s = ${fixed(share * 100, 1)} %`,
      met: share >= 0.5,
      value: share * 100,
      limit: 50,
    });
  }
  return out;
}

export function goalLines(list: Goal[]): string {
  return list.map((goal) => `${goal.met ? 'MET   ' : 'MISSED'}  ${goal.goal}: ${goal.measured}`).join('\n');
}
