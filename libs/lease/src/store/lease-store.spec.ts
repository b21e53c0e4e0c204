/**
 * The SQL pin: every statement `LeaseStore` sends — its name, text and parameters, and the framing around it where
 * the session has no bounds of its own — recorded by a pool that answers with canned rows (no PostgreSQL), for the
 * default names and for a custom set that needs quoting. The snapshot is the review surface of every change to a
 * statement: it must not change unless a commit means it to, and says why.
 */
import type pg from 'pg';
import type { EntityManager } from 'typeorm';
import { LeaseStore } from './lease-store.js';
import type { LeaseModuleOptions } from '../interfaces/lease-module-options.interface.js';
import { resolveLeaseOptions } from '../options/resolve-lease-options.js';
import { ownRow } from '../options/slot-limits.js';
import type { BoundStatement } from '../database/exchange.js';
import type { Queryable, SessionSource } from '../database/sessions.js';
import { mergeLeaseOptions } from '../internal.js';

/** One statement as the store sent it (`query_timeout` is left out: it is measured from the clock). */
interface Sent {
  source: string;
  name?: string;
  text: string;
  values?: unknown[];
}

type Answer = Record<string, unknown>[] | Error;

/**
 * A session source that records every statement and answers from a queue of canned results, one per statement
 * (framing statements — `BEGIN …`, `COMMIT` — are answered with no rows and take no canned result).
 */
class RecordingSource implements SessionSource {
  constructor(
    private readonly label: string,
    private readonly log: Sent[],
    private readonly answers: Answer[],
    readonly boundedMs?: number,
  ) {}

  withSession<T>(work: (session: Queryable) => Promise<T>): Promise<T> {
    const session: Queryable = {
      query: async <R extends pg.QueryResultRow>(config: pg.QueryConfig & { query_timeout?: number }) => {
        const { name, text, values } = config;
        this.log.push({ source: this.label, ...(name ? { name } : {}), text, ...(values ? { values } : {}) });
        const framing = text.startsWith('BEGIN ISOLATION LEVEL READ COMMITTED') || text === 'COMMIT';
        const answer = framing ? [] : this.answers.shift();
        if (answer === undefined) throw new Error(`no canned answer for: ${text.slice(0, 60)}`);
        if (answer instanceof Error) throw answer;
        return { rows: answer as R[], rowCount: answer.length } as pg.QueryResult<R>;
      },
    };
    return work(session);
  }
}

const OWNER = 'owner:pinned';
const TOKEN_A = '00000000-0000-4000-8000-00000000000a';
const TOKEN_B = '00000000-0000-4000-8000-00000000000b';
const TOKEN_C = '00000000-0000-4000-8000-00000000000c';
const WAITER_A = '00000000-0000-4000-8000-0000000000a1';
const WAITER_B = '00000000-0000-4000-8000-0000000000b1';
const QUEUED_AT = new Date('2026-01-02T03:04:05.000Z');
const TOKEN_ON_TIMELINE_1 = '1099511627777';

/** The configurations pinned: the names (default, custom), and sessions bounded by their own set-up or framed. */
const CONFIGURATIONS: Record<string, { options: LeaseModuleOptions; bounded: boolean }> = {
  'default names, own sessions': { options: {}, bounded: true },
  'default names, behind a transaction pooler (framed)': {
    options: { connections: { pooler: 'transaction' } },
    bounded: false,
  },
  'custom names, own sessions': {
    options: { tables: { schema: 'Lease "Ops"', tableName: `job's "lease"`, waiterTableName: 'Wait-Line' } },
    bounded: true,
  },
};

function sqlError(code: string, message: string, extra: Record<string, unknown> = {}): Error {
  return Object.assign(new Error(message), { code, ...extra });
}

/** A store over three recording sources (statements, lease heartbeat, waiter heartbeat) sharing one log. */
function recorder(configuration: string, moreOptions: LeaseModuleOptions = {}) {
  const { options, bounded } = CONFIGURATIONS[configuration];
  const resolved = resolveLeaseOptions(
    mergeLeaseOptions(
      { timing: { heartbeatIntervalMs: 1_000, leaseTimeoutMs: 4_000, waiterTimeoutMs: 3_000 }, owner: OWNER },
      options,
      moreOptions,
    ),
  );
  const log: Sent[] = [];
  const answers: Answer[] = [];
  const statementBound = bounded ? resolved.leaseTimeoutMs - resolved.safetyMarginMs : undefined;
  const db = new RecordingSource('statements', log, answers, statementBound);
  const heartbeat = new RecordingSource('heartbeat', log, answers, bounded ? resolved.heartbeatIntervalMs : undefined);
  const waiters = new RecordingSource(
    'waiters',
    log,
    answers,
    bounded ? resolved.waiterHeartbeatIntervalMs : undefined,
  );
  const store = new LeaseStore(db, heartbeat, resolved, waiters);
  return {
    store,
    options: resolved,
    log,
    /** Queues the canned results of the next statements, in order. */
    answer: (...next: Answer[]) => void answers.push(...next),
    /** The answers left unused (a test that queued too many has a wrong idea of the statements). */
    unused: () => answers.length,
  };
}

const grant = { fencing_token: TOKEN_ON_TIMELINE_1, took_over: false, previous_owner: null, hold_left_ms: null };
const request = (targetKey: string, leaseToken: string, extra: Record<string, unknown> = {}) => ({
  targetKey,
  leaseToken,
  priority: 0,
  holdMs: 0,
  ...extra,
});
const history = { recovery: false, timeline: '1', system_id: '7000000000000000001' };

/** Each public method (and each path of it that sends other statements), driven to completion. */
const SCENARIOS: Record<string, (r: ReturnType<typeof recorder>) => Promise<unknown>> = {
  "tryAcquire, single (maxBatchSize 1): the lone caller's statement": async (r) => {
    r.answer([grant]);
    return r.store.tryAcquire(request('report:1', TOKEN_A, { priority: 5, holdMs: 250 }));
  },
  "tryAcquire, single: the lone caller's statement finds a line, the single statement decides": async (r) => {
    r.answer([{ fencing_token: null, hold_left_ms: null, full: true }], [grant]);
    return r.store.tryAcquire(request('report:1', TOKEN_A, { priority: 5 }));
  },
  'tryAcquire, single, as a queued waiter': async (r) => {
    r.answer([{ ...grant, took_over: true, previous_owner: 'other' }]);
    return r.store.tryAcquire(request('report:1', TOKEN_A, { waiterId: WAITER_A, waiterSeq: 42n }));
  },
  'tryAcquire, single, refused during a hold': async (r) => {
    r.answer([{ fencing_token: null, hold_left_ms: 120, full: false }]);
    return r.store.tryAcquire(request('report:1', TOKEN_A));
  },
  'tryAcquire with queueAs (queued when refused)': async (r) => {
    r.answer([{ fencing_token: null, hold_left_ms: null, seq: '1099511627778', queued_at: QUEUED_AT }]);
    return r.store.tryAcquire(request('report:1', TOKEN_A, { priority: 3, queueAs: { waiterId: WAITER_A } }));
  },
  'semaphore: a slot granted (limit 4)': async (r) => {
    r.answer([{ ...grant, slot: 3, held_limit: null, raced: null }]);
    return r.store.slots.tryAcquire(request('report:1', TOKEN_A, { priority: 2 }), 4);
  },
  'semaphore: refused, the key held under another limit': async (r) => {
    r.answer([{ slot: null, fencing_token: null, hold_left_ms: null, held_limit: 3, raced: false }]);
    return r.store.slots.tryAcquire(request('report:1', TOKEN_A), 4);
  },
  'semaphore: raced for the last slot, sent again': async (r) => {
    r.answer([{ slot: null, fencing_token: null, hold_left_ms: null, held_limit: null, raced: true }], []);
    return r.store.slots.tryAcquire(request('report:1', TOKEN_A), 4);
  },
  'semaphore, batched: won, refused, raced (sent again alone); a waiter goes alone': async (r) => {
    const slotRow = { slot: null, fencing_token: null, took_over: null, previous_owner: null };
    r.answer(
      [{ ...grant, slot: 2, held_limit: null, raced: null }],
      [
        { ...slotRow, i: 1, outcome: 'won', slot: 1, fencing_token: TOKEN_ON_TIMELINE_1, took_over: false },
        { ...slotRow, i: 2, outcome: 'refused', held_limit: 3, hold_left_ms: null },
        { ...slotRow, i: 3, outcome: 'raced', held_limit: null, hold_left_ms: null },
        { ...slotRow, i: 4, outcome: 'refused', held_limit: null, hold_left_ms: 80 },
      ],
      [{ ...grant, fencing_token: '1099511627779', slot: 4, held_limit: null, raced: null }],
    );
    // Called in one turn of the event loop: the newcomers go as one batch, the waiter alone.
    return Promise.all([
      r.store.slots.tryAcquire(request('a', TOKEN_A, { priority: 1, holdMs: 10, leaseTimeoutMs: 9_000 }), 4),
      r.store.slots.tryAcquire(request('b', TOKEN_B), 4),
      r.store.slots.tryAcquire(request('a', TOKEN_C), 4),
      r.store.slots.tryAcquire(request('a', WAITER_A), 2),
      r.store.slots.tryAcquire(request('c', WAITER_B, { waiterId: WAITER_B, waiterSeq: 7n }), 4),
    ]);
  },
  'semaphore, batched releases: released, gone, a retry that goes alone; a read-write row alone': async (r) => {
    r.answer(
      [{ released: true, woke: 0 }],
      [
        { i: 1, outcome: 'released', woke: 1 },
        { i: 2, outcome: 'gone', woke: 1 },
        { i: 3, outcome: 'retry', woke: 1 },
      ],
      [{ released: true, woke: 0 }],
    );
    return Promise.all([
      r.store.release({ targetKey: 'a', slot: 1, semaphore: true }, TOKEN_A, 1_000),
      r.store.release({ targetKey: 'a', slot: 2, semaphore: true }, TOKEN_B, 700),
      r.store.release({ targetKey: 'b', slot: 4, semaphore: true }, TOKEN_C, 900),
      r.store.release({ targetKey: 'rw', slot: 2 }, WAITER_A, 800),
    ]);
  },
  'semaphore: a slot released (release sends slot rows to their statement)': async (r) => {
    r.answer([{ released: true, woke: 1 }]);
    return r.store.release({ targetKey: 'report:1', slot: 3 }, TOKEN_A, 1_000);
  },
  'tryAcquire, after a serialization failure (retried)': async (r) => {
    r.answer(sqlError('40001', 'could not serialize access'), [grant]);
    return r.store.tryAcquire(request('report:1', TOKEN_A));
  },
  'tryAcquire, batched: won, refused, and a retry that goes alone': async (r) => {
    r.answer(
      [
        { i: 1, outcome: 'won', fencing_token: TOKEN_ON_TIMELINE_1, took_over: false, previous_owner: null },
        { i: 2, outcome: 'refused', fencing_token: null, hold_left_ms: 80 },
        { i: 3, outcome: 'retry', fencing_token: null, hold_left_ms: null },
      ],
      [{ ...grant, fencing_token: '1099511627779' }],
    );
    // Called in one turn of the event loop: the group commit sends them as one batch.
    return Promise.all([
      r.store.tryAcquire(request('a', TOKEN_A, { priority: 1, holdMs: 10 })),
      r.store.tryAcquire(request('b', TOKEN_B, { priority: 2 })),
      r.store.tryAcquire(request('c', TOKEN_C)),
    ]);
  },
  // Only the single statement recognises a grant a release handed the waiter (direct handoff).
  'tryAcquire, a waiter goes alone while others batch': async (r) => {
    r.answer([{ ...grant, fencing_token: '1099511627780' }], [{ ...grant, fencing_token: '1099511627781' }]);
    return Promise.all([
      r.store.tryAcquire(request('a', WAITER_B, { waiterId: WAITER_B, waiterSeq: 7n })),
      r.store.tryAcquire(request('b', TOKEN_B)),
    ]);
  },
  'release, single (maxBatchSize 1)': async (r) => {
    r.answer([{ released: true }]);
    return r.store.release(ownRow('report:1'), TOKEN_A, 1_000);
  },
  'release, lone (acquired without a line): the lean statement': async (r) => {
    r.answer([{ released: true, line: false }]);
    return r.store.release(ownRow('report:1'), TOKEN_A, 1_000, true);
  },
  'release, lone: a line formed meanwhile, the single statement hands over': async (r) => {
    r.answer([{ released: false, line: true }], [{ released: true }]);
    return r.store.release(ownRow('report:1'), TOKEN_A, 1_000, true);
  },
  'release, batched: released, gone, and a retry that goes alone': async (r) => {
    r.answer(
      [
        { i: 1, outcome: 'released' },
        { i: 2, outcome: 'gone' },
        { i: 3, outcome: 'retry' },
      ],
      [{ released: true }],
    );
    return Promise.all([
      r.store.release(ownRow('a'), TOKEN_A, 1_000),
      r.store.release(ownRow('b'), TOKEN_B, 700),
      r.store.release(ownRow('c'), TOKEN_C, 900),
    ]);
  },
  'preempt: the ask, then the takeover at the end of the grace': async (r) => {
    const holder = { lease_token: TOKEN_A, fencing_token: '1099511627777', owner: 'other', priority: 1 };
    r.answer(
      [holder],
      [
        {
          fencing_token: '1099511627780',
          previous_owner: 'other',
          previous_token: '1099511627777',
          previous_priority: 1,
        },
      ],
    );
    const caller = { targetKey: 'report:1', priority: 5, waiterId: WAITER_B, waiterSeq: 7n };
    const asked = await r.store.preempt.ask(caller);
    return [asked, await r.store.preempt.take(caller, TOKEN_B, 0, asked!)];
  },
  'renew, without history': async (r) => {
    r.answer([{ lease_token: TOKEN_A, outcome: 'kept', ...history }]);
    return r.store.renew([ownRow('a')], [TOKEN_A], 1_000);
  },
  'renew, with history': async (r) => {
    r.answer([
      { lease_token: TOKEN_A, outcome: 'kept', ...history },
      { lease_token: TOKEN_B, outcome: 'failover', ...history },
    ]);
    return r.store.renew([ownRow('a'), { targetKey: 'b', slot: 2 }], [TOKEN_A, TOKEN_B], 1_000, {
      fencingTokens: [1099511627777n, 2199023255553n],
      systemId: '7000000000000000001',
    });
  },
  'renew, with history, the system identifier refused': async (r) => {
    r.answer(sqlError('42501', 'permission denied for function pg_control_system'), [
      { lease_token: TOKEN_A, outcome: 'kept', ...history, system_id: null },
    ]);
    return r.store.renew([ownRow('a')], [TOKEN_A], 1_000, { fencingTokens: [1099511627777n], systemId: null });
  },
  'renew, with history, on a server in recovery': async (r) => {
    r.answer(sqlError('25006', 'cannot execute UPDATE in a read-only transaction'), [
      { recovery: true, timeline: null, system_id: '7000000000000000001' },
    ]);
    return r.store.renew([ownRow('a')], [TOKEN_A], 1_000, { fencingTokens: [1099511627777n], systemId: null });
  },
  renewWaiters: async (r) => {
    r.answer([{ waiter_id: WAITER_A }, { waiter_id: null }]);
    return r.store.waiters.renew(['a', 'b'], [WAITER_A, WAITER_B], 1_000);
  },
  'enqueue, new': async (r) => {
    r.answer([{ seq: '1099511627778', queued_at: QUEUED_AT }]);
    return r.store.waiters.enqueue('report:1', WAITER_A, 2, undefined, 2_500);
  },
  'enqueue, at an old place, longer than the session bound': async (r) => {
    r.answer([]);
    return r.store.waiters.enqueue('report:1', WAITER_A, 2, { seq: 1099511627778n, queuedAt: QUEUED_AT }, 10_000);
  },
  dequeue: async (r) => {
    r.answer([]);
    return r.store.waiters.dequeue('report:1', WAITER_A);
  },
  // A release took the row with a grant committed while the dequeue waited: a release passes it on.
  'dequeue, its row taken by a grant': async (r) => {
    r.answer([{ row_taken: true }], [{ released: true }]);
    return r.store.waiters.dequeue('report:1', WAITER_A);
  },
  dequeueAll: async (r) => {
    r.answer([{ woke: '0', target_id: 'report:2', waiter_id: WAITER_B }], [{ released: true }]);
    await r.store.waiters.dequeueAll([]);
    return r.store.waiters.dequeueAll([
      { targetKey: 'report:1', id: WAITER_A },
      { targetKey: 'report:2', id: WAITER_B },
    ]);
  },
  'confirmGrant, confirmed': async (r) => {
    r.answer([{ fencing_token: '141836999983106' }]);
    return r.store.waiters.confirmGrant('report:1', WAITER_A, 0);
  },
  'confirmGrant, passed on': async (r) => {
    r.answer([]);
    return r.store.waiters.confirmGrant('report:1', WAITER_A, 250);
  },
  'snapshot, all': async (r) => {
    r.answer([]);
    return r.store.snapshot();
  },
  'snapshot, one key': async (r) => {
    r.answer([]);
    return r.store.snapshot('report:1');
  },
  serverHistory: async (r) => {
    r.answer([{ readable: true }], [history]);
    return r.store.serverHistory();
  },
  'serverHistory, the system identifier not readable': async (r) => {
    r.answer([{ readable: false }], [{ ...history, system_id: null }]);
    return r.store.serverHistory();
  },
  missingObjects: async (r) => {
    r.answer([{ lease: true, waiter: false, seq: true, wseq: false, seq_layout: false, wseq_layout: null }]);
    return r.store.schema.missingObjects();
  },
  missingPrivileges: async (r) => {
    r.answer([{ role: 'app', granted: [true, true, true, false, true, true, true, true, true, true, false] }]);
    return r.store.schema.missingPrivileges();
  },
  mayCreateSchema: async (r) => {
    r.answer([{ role: 'app', allowed: true }]);
    return r.store.schema.mayCreateSchema();
  },
  createSchema: async (r) => {
    // Ten statements (the token layout, the slot_limit column, the join result table's, the preemption column's and
    // the slot column's), a CREATE SCHEMA first for a schema other than public, then the operator's five.
    r.answer(...Array.from({ length: r.options.schema === 'public' ? 15 : 16 }, () => []));
    return r.store.schema.createSchema();
  },
};

/** `sentAt` is a monotonic time: pinned as a number, not its value. */
function pinned(result: unknown): unknown {
  if (Array.isArray(result)) return result.map(pinned);
  if (result === null || typeof result !== 'object' || result instanceof Date || result instanceof Set) return result;
  return Object.fromEntries(
    Object.entries(result).map(([key, value]) => [key, key === 'sentAt' ? typeof value : pinned(value)]),
  );
}

/** The store with batching off for the `single` scenarios, on (the default) for the others. */
function optionsFor(scenario: string): LeaseModuleOptions {
  if (scenario.includes('(maxBatchSize 1)')) return { connections: { maxBatchSize: 1 } };
  // An enqueue may take up to waiterTimeoutMs: past the statement pool's session bound, it frames its own.
  if (scenario.includes('longer than the session bound')) return { timing: { waiterTimeoutMs: 5_000 } };
  return {};
}

describe.each(Object.keys(CONFIGURATIONS))('LeaseStore statements: %s', (configuration) => {
  it.each(Object.keys(SCENARIOS))('%s', async (scenario) => {
    const r = recorder(configuration, optionsFor(scenario));
    const result = await SCENARIOS[scenario](r);
    expect(r.unused()).toBe(0);
    expect({ sent: r.log, result: pinned(result) }).toMatchSnapshot();
  });

  it('the fenced transaction’s lock and release (prepared off a pooler, sent with BEGIN and with COMMIT)', async () => {
    const r = recorder(configuration);
    const sent: Array<{ text: string; values: unknown[] }> = [];
    const manager = {
      query: async (text: string, values: unknown[]) => {
        sent.push({ text, values });
        return [{ lease_token: TOKEN_A, timeline: '1' }];
      },
    } as unknown as EntityManager;
    const result = await r.store.fence.lockForFence(manager, { targetKey: `report:'1'`, slot: 2 }, 1_234.5);
    // Each as prepared (its name, text and values) and as sent in a simple-query message (inlined).
    const shown = ({ inline, ...statement }: BoundStatement) => ({ ...statement, inlined: inline?.() });
    const release = shown(r.store.fence.releaseStatement({ targetKey: `report:'1'`, slot: 0 }, TOKEN_A));
    const slotRelease = shown(r.store.fence.releaseStatement({ targetKey: `report:'1'`, slot: 2 }, TOKEN_A));
    expect(r.log).toEqual([]);
    expect({ sent, result, release, slotRelease }).toMatchSnapshot();
  });

  it('the lock of a fenced transaction over several leases (every row, in the order given, one statement)', () => {
    const r = recorder(configuration);
    const rows = [
      { targetKey: `account:'7'`, slot: 0 },
      { targetKey: 'invoice:9', slot: 0 },
    ];
    const { inline, ...statement } = r.store.fence.lockManyStatement(rows, 1_234.5);
    const text = { ...statement, inlined: inline?.() };
    const locked = r.store.fence.lockedMany([
      { lease_token: TOKEN_A, timeline: '1', forced: false, preempt_of: null },
      { lease_token: null, timeline: '1', forced: true, preempt_of: null },
    ]);
    expect(r.log).toEqual([]);
    expect({ text, locked }).toMatchSnapshot();
  });

  it('names: the channel and the head channel', () => {
    const { store } = recorder(configuration);
    expect({ channel: store.channel, headChannel: store.headChannel }).toMatchSnapshot();
  });
});
