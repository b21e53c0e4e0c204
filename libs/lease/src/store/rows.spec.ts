import { leaseObjectNames } from '../schema/lease-schema.js';
import {
  acquireBatchItems,
  acquireBatchOutcomes,
  acquireOutcome,
  dequeueAllTaken,
  missingObjectNames,
  oldLayoutSequences,
  missingRights,
  releaseBatchOutcomes,
  renewOutcome,
  serverHistory,
} from './rows.js';
import { privilegeChecks } from './sql/bootstrap.sql.js';

const history = { recovery: false, timeline: '2', system_id: '7' };

/** What the statements' rows mean, apart from running them. */
describe('store rows', () => {
  it('the callers of a batch travel with 1-based positions, bigints as decimal strings, nulls for absent fields', () => {
    const items = acquireBatchItems([
      { targetKey: 'a', leaseToken: 't1', priority: 2, holdMs: 5 },
      {
        targetKey: 'b',
        leaseToken: 't2',
        priority: 0,
        holdMs: 0,
        waiterId: 'w',
        waiterSeq: 9007199254740993n,
        leaseTimeoutMs: 2_000,
      },
    ]);
    expect(items).toEqual([
      {
        i: 1,
        target_id: 'a',
        lease_token: 't1',
        priority: 2,
        waiter_id: null,
        waiter_seq: null,
        hold_ms: 5,
        // The statement's own (the module's) then.
        lease_timeout_ms: null,
      },
      {
        i: 2,
        target_id: 'b',
        lease_token: 't2',
        priority: 0,
        waiter_id: 'w',
        waiter_seq: '9007199254740993',
        hold_ms: 0,
        lease_timeout_ms: 2_000,
      },
    ]);
  });

  it('a batch row per caller: won (with the statement time), refused, retry; out of order is a bug of that caller', () => {
    const outcomes = acquireBatchOutcomes(
      4,
      [
        {
          i: 1,
          outcome: 'won',
          fencing_token: '1099511627777',
          took_over: true,
          previous_owner: 'x',
          hold_left_ms: null,
        },
        { i: 2, outcome: 'refused', fencing_token: null, took_over: null, previous_owner: null, hold_left_ms: 12 },
        { i: 3, outcome: 'retry', fencing_token: null, took_over: null, previous_owner: null, hold_left_ms: null },
        { i: 5, outcome: 'won', fencing_token: '1', took_over: false, previous_owner: null, hold_left_ms: null },
      ],
      123,
    );
    expect(outcomes[0]).toEqual({
      ok: true,
      value: { fencingToken: 1099511627777n, sentAt: 123, tookOver: true, previousOwner: 'x' },
    });
    expect(outcomes[1]).toEqual({ ok: true, value: { refused: true, holdLeftMs: 12 } });
    expect(outcomes[2]).toEqual({ ok: true, value: 'retry' });
    expect(outcomes[3].ok).toBe(false);
    expect(String((outcomes[3] as { error: unknown }).error)).toMatch(/out of order at row 3/);
  });

  it('the single statement: a grant, a refusal, and the place of a queued refusal (null when the line is full)', () => {
    const row = {
      fencing_token: null,
      took_over: null,
      previous_owner: null,
      hold_left_ms: null,
      seq: null,
      queued_at: null,
    };
    expect(acquireOutcome(undefined, 1, false)).toEqual({ refused: true, holdLeftMs: null });
    expect(acquireOutcome(undefined, 1, true)).toEqual({ refused: true, holdLeftMs: null, place: null, behind: false });
    const at = new Date(0);
    expect(acquireOutcome({ ...row, seq: '5', queued_at: at }, 1, true)).toEqual({
      refused: true,
      holdLeftMs: null,
      place: { seq: 5n, queuedAt: at },
      behind: false,
    });
    // Queued behind a live waiter: the wait sends nothing more until its turn (see WaitQueue).
    expect(acquireOutcome({ ...row, seq: '6', queued_at: at, behind: true }, 1, true)).toMatchObject({ behind: true });
    expect(acquireOutcome({ ...row, fencing_token: '3', took_over: false }, 9, false)).toEqual({
      fencingToken: 3n,
      sentAt: 9,
      tookOver: false,
      previousOwner: null,
    });
  });

  it('a renewal sorts each token by its outcome; lost tokens are in no set; failover only with history', () => {
    const rows = (['kept', 'skipped', 'expired', 'lost', 'failover'] as const).map((outcome) => ({
      lease_token: outcome,
      outcome,
      ...history,
    }));
    const withHistory = renewOutcome(rows, { fencingTokens: [], systemId: null });
    expect([...withHistory.kept, ...withHistory.skipped, ...withHistory.expired]).toEqual([
      'kept',
      'skipped',
      'expired',
    ]);
    expect([...withHistory.failover!]).toEqual(['failover']);
    expect(withHistory.history).toEqual({ recovery: false, timeline: 2n, systemId: '7' });
    const without = renewOutcome(rows, undefined);
    expect(without.failover).toBeUndefined();
    expect(without.history).toBeUndefined();
  });

  it('server history: a null timeline (in recovery) stays null', () => {
    expect(serverHistory({ recovery: true, timeline: null, system_id: null })).toEqual({
      recovery: true,
      timeline: null,
      systemId: null,
    });
  });

  it('a release batch: released, gone (false), retry, by position', () => {
    const outcomes = releaseBatchOutcomes(3, [
      { i: 1, outcome: 'released' },
      { i: 2, outcome: 'gone' },
      { i: 3, outcome: 'retry' },
    ]);
    expect(outcomes.map((outcome) => (outcome.ok ? outcome.value : 'error'))).toEqual([true, false, 'retry']);
    expect(releaseBatchOutcomes(1, [])[0].ok).toBe(false);
  });

  it("the shutdown's dequeue: one typed row per waiter a grant took (keys with spaces intact), nulls for none", () => {
    const id = '00000000-0000-4000-8000-0000000000a1';
    expect(dequeueAllTaken([{ target_id: null, waiter_id: null }])).toEqual([]);
    expect(
      dequeueAllTaken([
        { target_id: 'a b', waiter_id: id },
        { target_id: `x ${id}`, waiter_id: id },
      ]),
    ).toEqual([
      { targetKey: 'a b', waiterId: id },
      { targetKey: `x ${id}`, waiterId: id },
    ]);
  });

  it('the bootstrap checks name what is missing', () => {
    const n = leaseObjectNames({ schema: 'public', tableName: 'job_lease', waiterTableName: 'job_lease_waiter' });
    const row = { lease: true, waiter: false, seq: true, wseq: false, seq_layout: false, wseq_layout: null };
    expect(missingObjectNames(row, n)).toEqual(['"public"."job_lease_waiter"', '"public"."job_lease_waiter_seq"']);
    // A sequence of the 40-bit token layout is named (a missing one is only missing).
    expect(oldLayoutSequences(row, n)).toEqual(['"public"."job_lease_fencing_seq"']);
    expect(oldLayoutSequences({ ...row, seq_layout: true }, n)).toEqual([]);
    const checks = privilegeChecks(n, 'public');
    const granted = checks.map((_, i) => i !== 4);
    expect(missingRights(checks, granted)).toEqual([checks[4][3]]);
  });
});
