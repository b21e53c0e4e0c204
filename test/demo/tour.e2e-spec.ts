import type pg from 'pg';
import { type DemoStack, startStack } from '../../apps/demo/scripts/stack.js';
import { runTour, type TourFacts } from '../../apps/demo/scripts/tour.js';
import { adminClient, createTestDatabase } from '../support/db.js';
import { ensureDemoBuilt, sample } from './support.js';

// The tour's core steps on the compiled demo (two instances and the scoring API as child processes), each outcome
// checked in the database; plus /health and /metrics over HTTP before and after.

let db: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
let stack: DemoStack | undefined;
let client: pg.Client | undefined;
const timeline: string[] = [];

beforeAll(async () => {
  await ensureDemoBuilt();
  db = await createTestDatabase('demo');
  stack = await startStack({ databaseUrl: db.url });
  client = await adminClient(db.url);
}, 240_000);

afterAll(async () => {
  await client?.end();
  await stack?.stop();
  await db?.drop();
});

const get = async (url: string) => {
  const response = await fetch(url);
  return { status: response.status, text: await response.text() };
};
const rows = async (sql: string, values: unknown[] = []) => (await client!.query(sql, values)).rows;

test('health answers up and the lease counters start at zero', async () => {
  for (const url of Object.values(stack!.urls)) {
    const health = await get(`${url}/health`);
    expect(health.status).toBe(200);
    expect(JSON.parse(health.text)).toMatchObject({ status: 'ok', info: { leases: { status: 'up', held: 0 } } });
    const metrics = await get(`${url}/metrics`);
    expect(metrics.status).toBe(200);
    expect(sample(metrics.text, 'lease_acquisitions_total')).toBe(0);
    expect(sample(metrics.text, 'lease_busy_total')).toBe(0);
  }
});

describe('the tour', () => {
  let facts: TourFacts;

  beforeAll(async () => {
    try {
      facts = await runTour(stack!, db!.url, { print: (line) => timeline.push(line) });
    } catch (error) {
      throw new Error(`${String(error)}\n${timeline.join('\n')}\n${stack!.output()}`, { cause: error });
    }
  }, 120_000);

  test('1: a duplicate click and the same user on the other instance are refused with 409', () => {
    expect(facts.duplicate.first.status).toBe(202);
    expect(facts.duplicate.again).toMatchObject({
      status: 409,
      body: { code: 'LeaseBusyError', targetKey: 'report:user:1' },
    });
    expect(facts.duplicate.otherInstance).toMatchObject({ status: 409, body: { code: 'LeaseBusyError' } });
  });

  test('2: after SIGKILL of the holder, the other instance took over with a larger token and only its save exists', async () => {
    const { victimToken, takeoverToken, refusedBeforeTakeover, takeoverAfterMs } = facts.kill;
    expect(takeoverToken).toBeGreaterThan(victimToken);
    // Refused while the dead holder's lease was live: the takeover waited for the timeout (counted from the last
    // heartbeat, which came some time before the kill; half the timeout leaves room for late heartbeats).
    expect(refusedBeforeTakeover).toBeGreaterThan(0);
    expect(takeoverAfterMs).toBeGreaterThanOrEqual(stack!.options.leaseTimeoutMs / 2);
    expect(await rows('SELECT fencing_token, instance FROM job_result WHERE user_id = 1')).toEqual([
      { fencing_token: String(takeoverToken), instance: 'B' },
    ]);
  });

  test('3: the stale instance saved nothing; job_result holds the newer token', async () => {
    const { staleToken, takeoverToken, discardedDetail } = facts.stale;
    expect(takeoverToken).toBeGreaterThan(staleToken);
    expect(discardedDetail).toMatch(/lease lost/);
    expect(await rows('SELECT fencing_token, instance FROM job_result WHERE user_id = 2')).toEqual([
      { fencing_token: String(takeoverToken), instance: 'B' },
    ]);
    expect(await rows('SELECT 1 FROM job_result WHERE fencing_token = $1', [String(staleToken)])).toEqual([]);
  });

  test('4: waiters were granted by priority: the saves in fencing-token order have priorities 0, 10, 5, 1', async () => {
    const saved = await rows(
      'SELECT fencing_token::text AS token, instance, priority FROM job_result WHERE user_id = 3 ORDER BY fencing_token',
    );
    expect(saved.map((row) => [row.instance, row.priority])).toEqual([
      ['A', 0],
      ['A', 10],
      ['B', 5],
      ['B', 1],
    ]);
    expect(BigInt(saved[0].token)).toBe(facts.priority.holderToken);
  });

  test('nothing is left behind: no lease, no waiter; tokens of all saves are distinct', async () => {
    expect(await rows('SELECT target_id FROM job_lease WHERE lease_token IS NOT NULL')).toEqual([]);
    expect(await rows('SELECT target_id FROM job_lease_waiter')).toEqual([]);
    const [{ saves, tokens }] = await rows(
      'SELECT count(*)::int AS saves, count(DISTINCT fencing_token)::int AS tokens FROM job_result',
    );
    expect(saves).toBe(6);
    expect(tokens).toBe(6);
  });

  test('metrics moved: takeovers, busy refusals, losses and priority grants are counted; health is up', async () => {
    // A was restarted in step 2, so its counters cover steps 3 and 4 only.
    const a = (await get(`${stack!.urls.A}/metrics`)).text;
    const b = (await get(`${stack!.urls.B}/metrics`)).text;
    expect(sample(b, 'lease_takeovers_total')).toBe(2);
    expect(sample(b, 'lease_acquisitions_total')).toBe(4);
    expect(sample(b, 'lease_busy_total')).toBeGreaterThanOrEqual(1 + facts.kill.refusedBeforeTakeover);
    expect(sample(b, 'lease_waits_total', { outcome: 'granted' })).toBe(2);
    expect(sample(b, 'lease_heartbeat_latency_seconds_count')).toBeGreaterThan(0);
    expect(sample(a, 'lease_acquisitions_total')).toBe(3);
    expect(
      sample(a, 'lease_lost_total', { reason: 'renewal-deadline' }) +
        sample(a, 'lease_lost_total', { reason: 'taken-over' }),
    ).toBe(1);
    expect(sample(a, 'lease_waits_total', { outcome: 'granted' })).toBe(1);
    for (const text of [a, b]) {
      expect(sample(text, 'lease_held')).toBe(0);
      expect(sample(text, 'lease_waiters')).toBe(0);
    }
    for (const url of Object.values(stack!.urls)) {
      expect(JSON.parse((await get(`${url}/health`)).text)).toMatchObject({
        status: 'ok',
        info: { leases: { status: 'up' } },
      });
    }
  });
});

describe('the other doors into the same lease', () => {
  const post = async (url: string, body: unknown) => {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Record<string, any> };
  };

  test('the @Exclusive controller handler (synchronous) is refused while the background run holds the user, then saves', async () => {
    const { A, B } = stack!.urls;
    const background = await post(`${A}/api/users/4/report`, { latencyMs: 1_500 });
    expect(background.status).toBe(202);
    const refused = await post(`${B}/api/users/4/report/sync`, { latencyMs: 0 });
    expect(refused).toMatchObject({ status: 409, body: { code: 'LeaseBusyError', targetKey: 'report:user:4' } });
    // Once the background run has saved and released, the synchronous variant runs and answers with its save.
    let answer = refused;
    for (const until = Date.now() + 20_000; answer.status !== 201 && Date.now() < until;) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      answer = await post(`${B}/api/users/4/report/sync`, { latencyMs: 0 });
    }
    expect(answer).toMatchObject({ status: 201, body: { userId: 4, instance: 'B' } });
    expect(BigInt(answer.body.fencingToken)).toBeGreaterThan(BigInt(background.body.fencingToken));
    expect(
      await rows('SELECT fencing_token, instance FROM job_result WHERE user_id = 4 ORDER BY fencing_token'),
    ).toEqual([
      { fencing_token: String(background.body.fencingToken), instance: 'A' },
      { fencing_token: String(answer.body.fencingToken), instance: 'B' },
    ]);
  });

  test('an urgent rebuild preempts a running one: discarded there, saved here with a higher token; both tokens shown', async () => {
    const { A, B } = stack!.urls;
    const running = await post(`${A}/api/users/6/report`, { latencyMs: 60_000 });
    expect(running.status).toBe(202);
    const runningToken = String(running.body.fencingToken);
    const urgent = await post(`${B}/api/admin/users/6/report/urgent`, { latencyMs: 0 });
    expect(urgent).toMatchObject({ status: 202, body: { status: 'preempting', priority: 100 } });
    let saved: Array<Record<string, any>> = [];
    for (const until = Date.now() + 30_000; saved.length === 0 && Date.now() < until;) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      saved = await rows('SELECT fencing_token, instance, priority FROM job_result WHERE user_id = 6');
    }
    // Only the urgent report was saved: the running one's save would have been refused.
    expect(saved).toHaveLength(1);
    expect(saved[0]).toMatchObject({ instance: 'B', priority: 100 });
    expect(BigInt(saved[0].fencing_token)).toBeGreaterThan(BigInt(runningToken));
    // The dashboard's recent events (GET /api/state): B's preemption names both fencing tokens, A's report is discarded.
    const events = async (url: string) =>
      ((await (await fetch(`${url}/api/state`)).json()) as { events: Array<Record<string, string>> }).events;
    const preempted = (await events(B)).find((event) => event.type === 'preempted');
    expect(preempted).toMatchObject({ targetKey: 'report:user:6', fencingToken: String(saved[0].fencing_token) });
    expect(preempted!.detail).toContain(`fencing token ${runningToken} → ${saved[0].fencing_token}`);
    let discarded: Record<string, string> | undefined;
    for (const until = Date.now() + 10_000; !discarded && Date.now() < until;) {
      discarded = (await events(A)).find(
        (event) => event.type === 'report-discarded' && event.fencingToken === runningToken,
      );
      if (!discarded) await new Promise((resolve) => setTimeout(resolve, 200));
    }
    expect(discarded?.detail).toMatch(/preempted/);
  });

  test('bad input is a 400, not a lease', async () => {
    const answer = await post(`${stack!.urls.A}/api/users/5/report`, { latencyMs: -1 });
    expect(answer.status).toBe(400);
    const held = "SELECT 1 FROM job_lease WHERE target_id = 'report:user:5' AND lease_token IS NOT NULL";
    expect(await rows(held)).toEqual([]);
  });
});
