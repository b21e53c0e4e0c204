import type pg from 'pg';
import { framing, poolSessions, runStatement, sessionSetup, type Queryable, type SessionSource } from './sessions.js';

type Call = { text: string; timeout?: number; at: number };

/** A session source that records each statement, its client timeout and when it was sent. */
function source(boundedMs?: number, delayMs = 0) {
  const calls: Call[] = [];
  const session: Queryable = {
    query: async <R extends pg.QueryResultRow>(config: pg.QueryConfig & { query_timeout?: number }) => {
      calls.push({ text: config.text, timeout: config.query_timeout, at: performance.now() });
      if (delayMs) await new Promise((resolve) => setTimeout(resolve, delayMs));
      return { rows: [{ n: 1 }] as unknown as R[] } as pg.QueryResult<R>;
    },
  };
  const src: SessionSource = { boundedMs, withSession: (work) => work(session) };
  return { src, calls };
}

describe('sessions: the one bounded executor', () => {
  it('the set-up of an own session bounds it, READ COMMITTED, durable; custom plans on request', () => {
    const text = sessionSetup({ boundMs: 1_500.7 });
    expect(text.split('; ').slice(0, 4)).toEqual([
      'SET statement_timeout = 1500',
      'SET lock_timeout = 1500',
      'SET idle_in_transaction_session_timeout = 1500',
      "SET default_transaction_isolation = 'read committed'",
    ]);
    expect(text).toContain("set_config('synchronous_commit', 'on', false)");
    expect(text).not.toContain('plan_cache_mode');
    expect(sessionSetup({ boundMs: 10, customPlans: true })).toContain('SET plan_cache_mode = force_custom_plan');
  });

  it('the framing of a shared session sets the same bounds with SET LOCAL, in a READ COMMITTED transaction', () => {
    const text = framing({ boundMs: 0.2, customPlans: true });
    expect(text.startsWith('BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL statement_timeout = 1;')).toBe(true);
    expect(text).toContain('SET LOCAL plan_cache_mode = force_custom_plan');
    expect(text).toContain("set_config('synchronous_commit', 'on', true)");
    expect(text).not.toMatch(/SET (?!LOCAL)/);
  });

  it('on a bounded session a statement within its bound is sent alone, client timeout = bound + slack', async () => {
    const { src, calls } = source(1_000);
    const { rows, sentAt } = await runStatement(src, { text: 'SELECT 1', boundMs: 1_000, slackMs: 200 });
    expect(rows).toEqual([{ n: 1 }]);
    expect(calls.map((call) => call.text)).toEqual(['SELECT 1']);
    expect(calls[0].timeout).toBeGreaterThan(1_150);
    expect(calls[0].timeout).toBeLessThanOrEqual(1_200);
    expect(sentAt).toBeLessThanOrEqual(calls[0].at);
  });

  it('a statement longer than the session bound, or on an unbounded session, is framed and committed', async () => {
    for (const boundedMs of [500, undefined]) {
      const { src, calls } = source(boundedMs);
      await runStatement(src, { text: 'SELECT 2', boundMs: 1_000 });
      expect(calls.map((call) => call.text)).toEqual([framing({ boundMs: 1_000 }), 'SELECT 2', 'COMMIT']);
    }
  });

  it('sentAt of a framed statement is measured after the framing: the lease counts from the statement', async () => {
    const { src, calls } = source(undefined, 20);
    const { sentAt } = await runStatement(src, { text: 'SELECT 3', boundMs: 1_000 });
    expect(sentAt).toBeGreaterThanOrEqual(calls[0].at + 15);
    expect(sentAt).toBeLessThanOrEqual(calls[1].at);
    // One deadline for the three round trips: each later one gets what is left of it.
    expect(calls[2].timeout!).toBeLessThan(calls[0].timeout!);
  });

  it('a pool client is released, as broken when the work failed', async () => {
    const released: unknown[] = [];
    const client = {
      on: () => undefined,
      off: () => undefined,
      release: (error?: unknown) => released.push(error),
      query: async () => ({ rows: [] }),
    };
    const sessions = poolSessions({ connect: async () => client as never, query: async () => ({}) as never }, 5);
    expect(sessions.boundedMs).toBe(5);
    await sessions.withSession(async () => 1);
    const failure = new Error('boom');
    await expect(sessions.withSession(async () => Promise.reject(failure))).rejects.toBe(failure);
    expect(released).toEqual([undefined, failure]);
  });
});
