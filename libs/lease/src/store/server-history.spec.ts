import { resolveLeaseOptions } from '../options/resolve-lease-options.js';
import { settleTokens } from './server-history.js';
import type { RunStatement } from './schema-store.js';
import { buildStatements } from './statement-texts.js';

/**
 * Where new tokens stand (`settleTokens`), decided from the server's answers (canned here; the statements run on a
 * real server in test/lease/token-floor.e2e-spec.ts and test/failover/bluegreen.failover-spec.ts).
 */
const options = resolveLeaseOptions({ owner: 'o' });
const { sql } = buildStatements(options);
const token = (timeline: bigint, n: bigint) => ((timeline << 47n) | n).toString();

/** A `run` answering each statement from `answers` by its text, recording the values of the raise. */
function server(answers: Partial<Record<'walReadable' | 'walProbe' | 'tableTops' | 'raiseSequences', unknown>>) {
  const raised: unknown[][] = [];
  const run = (async ({ text, values }: { text: string; values?: unknown[] }) => {
    const key = (Object.keys(answers) as Array<keyof typeof answers>).find((name) => sql[name] === text);
    if (!key) throw new Error(`unexpected statement: ${text.slice(0, 60)}`);
    if (key === 'raiseSequences') raised.push(values ?? []);
    const answer = answers[key];
    if (answer instanceof Error) throw answer;
    return { rows: answer as never[], sentAt: 0 };
  }) as RunStatement;
  return { run, raised };
}

describe('settleTokens', () => {
  it('the server’s own timeline when the tables are on it or earlier; the raise gets the timeline and the tops', async () => {
    const { run, raised } = server({
      walReadable: [{ readable: true }],
      walProbe: [{ timeline: '2' }],
      tableTops: [{ token: token(1n, 900n), seq: token(2n, 5n) }],
      raiseSequences: [],
    });
    expect(await settleTokens(run, sql, options)).toEqual({ fixed: null, serverTimeline: 2n, raises: [] });
    expect(raised).toEqual([['2', token(1n, 900n), token(2n, 5n)]]);
  });

  it('tables holding a later timeline than the server’s: that timeline, fixed', async () => {
    const { run, raised } = server({
      walReadable: [{ readable: true }],
      walProbe: [{ timeline: '1' }],
      tableTops: [{ token: token(3n, 900n), seq: null }],
      raiseSequences: [
        { kind: 'fencing', name: '"public"."job_lease_fencing_seq"', stood: null, above: '900', raised_to: '1049476' },
      ],
    });
    expect(await settleTokens(run, sql, options)).toEqual({
      fixed: 3n,
      reason: 'tables',
      serverTimeline: 1n,
      raises: [
        { kind: 'fencing', sequence: '"public"."job_lease_fencing_seq"', stood: null, above: 900n, raisedTo: 1049476n },
      ],
    });
    expect(raised[0][0]).toBe('3');
  });

  it('WAL functions not executable (no right, or refused): the largest timeline in the tables, at least 1', async () => {
    const refused = Object.assign(new Error('function pg_current_wal_lsn() is not supported'), { code: '0A000' });
    for (const answers of [
      { walReadable: [{ readable: false }] },
      { walReadable: [{ readable: true }], walProbe: refused },
    ]) {
      const { run, raised } = server({ ...answers, tableTops: [{ token: null, seq: null }], raiseSequences: [] });
      expect(await settleTokens(run, sql, options)).toEqual({
        fixed: 1n,
        reason: 'wal',
        serverTimeline: null,
        raises: [],
      });
      expect(raised).toEqual([['1', null, null]]);
    }
  });

  it('a server in recovery (a standby): nothing fixed, nothing raised', async () => {
    const { run, raised } = server({
      walReadable: [{ readable: true }],
      walProbe: [{ timeline: null }],
      tableTops: [{ token: token(1n, 900n), seq: null }],
    });
    expect(await settleTokens(run, sql, options)).toEqual({ fixed: null, serverTimeline: null, raises: [] });
    expect(raised).toEqual([]);
  });
});
