/**
 * `npm run demo`: the story of the first source document on real processes and a real PostgreSQL, as a timeline.
 * Each step checks its outcome (HTTP answers, the database) and the tour fails loudly if the story is not true.
 */
import { pathToFileURL } from 'node:url';
import { createDatabase, dropDatabase, startPostgres } from '@app/pg-harness';
import pg from 'pg';
import { type DemoStack, type InstanceName, startStack } from './stack.js';

export interface Answer {
  status: number;
  body: Record<string, any>;
}

/** What happened, for the e2e test to check against the database. */
export interface TourFacts {
  duplicate: { first: Answer; again: Answer; otherInstance: Answer };
  kill: { victimToken: bigint; takeoverToken: bigint; refusedBeforeTakeover: number; takeoverAfterMs: number };
  stale: { staleToken: bigint; takeoverToken: bigint; discardedDetail: string };
  priority: { holderToken: bigint; queued: Array<{ instance: InstanceName; priority: number }>; grantOrder: number[] };
}

class TourError extends Error {
  override readonly name = 'TourError';
}

function check(condition: unknown, what: string): asserts condition {
  if (!condition) throw new TourError(what);
}

async function call(method: 'GET' | 'POST', url: string, body?: unknown): Promise<Answer> {
  const response = await fetch(url, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(15_000),
  });
  const text = await response.text();
  return { status: response.status, body: text ? (JSON.parse(text) as Record<string, any>) : {} };
}

async function until<T>(
  probe: () => Promise<T | undefined>,
  what: string,
  timeoutMs = 20_000,
  everyMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    // Network errors are retried (a process may be restarting); a broken promise of the story is not.
    const value = await probe().catch((error: unknown) => {
      if (error instanceof TourError) throw error;
      return undefined;
    });
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new TourError(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** One timeline line: elapsed time, who, what happened, fencing token. */
export type Print = (line: string) => void;

function timeline(print: Print, startedAt = performance.now()) {
  return (who: string, what: string, token?: bigint | string) => {
    const elapsed = `+${((performance.now() - startedAt) / 1000).toFixed(2)}s`;
    print(
      `${elapsed.padStart(8)}  ${who.padEnd(7)}  ${what.padEnd(86)}  ${token === undefined ? '' : `token ${token}`}`.trimEnd(),
    );
  };
}

/**
 * The tour's steps against a running stack. Users 1, 2, 3 must have no report yet. `databaseUrl` is read to show
 * (and check) what was committed.
 */
export async function runTour(
  stack: DemoStack,
  databaseUrl: string,
  options: { print?: Print; startedAt?: number } = {},
): Promise<TourFacts> {
  const print = options.print ?? console.log;
  const line = timeline(print, options.startedAt);
  const db = new pg.Client({ connectionString: databaseUrl });
  // A dropped connection (the server stopping on Ctrl-C) fails the next query; it must not crash the process.
  db.on('error', () => undefined);
  await db.connect();
  const url = (name: InstanceName, path: string) => `${stack.urls[name]}${path}`;
  const start = (name: InstanceName, userId: number, latencyMs: number) =>
    call('POST', url(name, `/api/users/${userId}/report`), { latencyMs });
  const tokensOf = async (userId: number) =>
    (
      await db.query<{ fencing_token: string; instance: string; priority: number }>(
        'SELECT fencing_token, instance, priority FROM job_result WHERE user_id = $1 ORDER BY fencing_token',
        [userId],
      )
    ).rows;
  /** Retries a start on `name` until it is accepted, the way an impatient user would. */
  const retryUntilAccepted = async (name: InstanceName, userId: number, latencyMs: number) => {
    const began = performance.now();
    let refused = 0;
    const accepted = await until(
      async () => {
        const answer = await start(name, userId, latencyMs);
        if (answer.status === 409) refused += 1;
        else if (answer.status === 202) return answer;
        else throw new TourError(`unexpected answer ${answer.status}: ${JSON.stringify(answer.body)}`);
        return undefined;
      },
      `${name} to take over user ${userId}`,
      30_000,
      200,
    );
    return { token: BigInt(accepted.body.fencingToken), refused, afterMs: performance.now() - began };
  };
  const savedToken = (name: InstanceName, userId: number, token: bigint) =>
    until(async () => {
      const answer = await call('GET', url(name, `/api/users/${userId}/report`));
      return answer.status === 200 && BigInt(answer.body.latest.fencingToken) === token ? answer : undefined;
    }, `the report of user ${userId} with token ${token}`);
  /** Waits until the scoring API reports a call of `caller` for `userId` in the given state. */
  const scoringCall = (userId: number, caller: InstanceName, outcome: string) =>
    until(async () => {
      const calls = (await call('GET', `${stack.scoringUrl}/stats`)).body.recent as Array<Record<string, unknown>>;
      return calls.some((c) => c.userId === userId && c.caller === caller && c.outcome === outcome) ? true : undefined;
    }, `a ${outcome} scoring call of ${caller} for user ${userId}`);
  const timeoutS = stack.options.leaseTimeoutMs / 1000;

  try {
    print(`\nTimeline (lease timeout ${timeoutS} s, heartbeat every ${stack.options.heartbeatIntervalMs / 1000} s)\n`);

    // 1. Double clicks and a second instance are refused while a run holds the user.
    line('', '1. Duplicate clicks and the other instance are refused');
    const first = await start('A', 1, 60_000);
    check(first.status === 202, `first start should be accepted, got ${first.status}`);
    const victimToken = BigInt(first.body.fencingToken);
    line('A', 'user 1: report started in the background (202); the scoring call takes a minute', victimToken);
    const again = await start('A', 1, 60_000);
    check(again.status === 409, `a duplicate click should be refused, got ${again.status}`);
    line('A', `user 1: duplicate click refused (409, Retry-After ${again.body.retryAfterSeconds} s)`);
    const otherInstance = await start('B', 1, 60_000);
    check(otherInstance.status === 409, `the other instance should refuse, got ${otherInstance.status}`);
    line('B', 'user 1: same user on the other instance refused (409)');

    // 2. The holder dies; its lease expires by the database clock and the other instance takes over.
    line('', '2. The holder is killed mid-work; the other instance takes over after the timeout');
    stack.signal('A', 'SIGKILL');
    line('A', 'SIGKILL while holding user 1: no release, the row stays until it expires');
    const kill = await retryUntilAccepted('B', 1, 1_500);
    check(kill.token > victimToken, `the takeover's fencing token ${kill.token} should exceed ${victimToken}`);
    line('B', `user 1: retried every 0.2 s, refused ${kill.refused}× while the lease was live`);
    line(
      'B',
      `user 1: took over ${(kill.afterMs / 1000).toFixed(1)} s after the kill, larger fencing token`,
      `${kill.token} > ${victimToken}`,
    );
    const restarting = stack.restart('A');
    await savedToken('B', 1, kill.token);
    line('B', 'user 1: report saved with a fenced write', kill.token);
    await restarting;
    line('A', 'restarted (a fresh process, new owner id)');

    // 3. A paused holder wakes up after a takeover: its lease is lost, its call cancelled, its save discarded.
    line('', '3. A stale instance wakes up: its save is discarded');
    const paused = await start('A', 2, 60_000);
    check(paused.status === 202, `start for user 2 should be accepted, got ${paused.status}`);
    const staleToken = BigInt(paused.body.fencingToken);
    line('A', 'user 2: report started', staleToken);
    await scoringCall(2, 'A', 'pending');
    stack.signal('A', 'SIGSTOP');
    line('A', 'SIGSTOP: frozen while its scoring call is in flight; no heartbeats, still believes it holds user 2');
    const stale = await retryUntilAccepted('B', 2, 1_500);
    check(stale.token > staleToken, `the takeover's fencing token ${stale.token} should exceed ${staleToken}`);
    line(
      'B',
      `user 2: took over A's expired lease (refused ${stale.refused}× before)`,
      `${stale.token} > ${staleToken}`,
    );
    stack.signal('A', 'SIGCONT');
    line('A', 'SIGCONT: resumes exactly where it stopped');
    const discarded = await until(async () => {
      const state = await call('GET', url('A', '/api/state'));
      return (state.body.events as Array<Record<string, string>>).find(
        (event) => event.type === 'report-discarded' && event.fencingToken === String(staleToken),
      );
    }, "A's discarded save");
    line('A', `user 2: ${discarded.detail}`, staleToken);
    await scoringCall(2, 'A', 'cancelled');
    line('scoring', "A's call for user 2 was cancelled by its caller (the lease's signal)");
    await savedToken('B', 2, stale.token);
    line('B', 'user 2: report saved with a fenced write', stale.token);
    const user2 = await tokensOf(2);
    check(
      user2.length === 1 && BigInt(user2[0].fencing_token) === stale.token,
      `job_result for user 2 should hold only token ${stale.token}, holds ${JSON.stringify(user2)}`,
    );
    line('db', `job_result for user 2 holds only the newer token; nothing from token ${staleToken}`, stale.token);

    // 4. Waiters are served by priority, then first come first served.
    line('', '4. Priority: admin requests wait their turn and are granted highest first');
    const holder = await start('A', 3, 3_000);
    check(holder.status === 202, `start for user 3 should be accepted, got ${holder.status}`);
    const holderToken = BigInt(holder.body.fencingToken);
    line('A', 'user 3: report started (3 s of scoring)', holderToken);
    const queued: Array<{ instance: InstanceName; priority: number }> = [
      { instance: 'B', priority: 1 },
      { instance: 'A', priority: 10 },
      { instance: 'B', priority: 5 },
    ];
    for (const request of queued) {
      const answer = await call('POST', url(request.instance, '/api/admin/users/3/report'), {
        priority: request.priority,
        latencyMs: 300,
      });
      check(answer.status === 202, `admin request should be queued, got ${answer.status}`);
      line(request.instance, `user 3: admin report queued with priority ${request.priority} (202)`);
    }
    const line3 = await until(async () => {
      const rows = (await call('GET', url('B', '/api/leases'))).body as unknown as Array<Record<string, any>>;
      const waiting = rows.filter((row) => row.targetKey === 'report:user:3' && row.state === 'waiting' && row.live);
      return waiting.length === queued.length ? waiting : undefined;
    }, 'three waiters on user 3');
    line(
      'db',
      `waiting line for user 3: ${line3.map((row) => `${String(row.owner).split('/')[0]} p${row.priority}`).join(', ')}`,
    );
    let shown = 1;
    const results3 = await until(
      async () => {
        const rows = await tokensOf(3);
        for (const row of rows.slice(shown))
          line(row.instance, `user 3: granted and saved, priority ${row.priority}`, row.fencing_token);
        shown = Math.max(shown, rows.length);
        return rows.length === queued.length + 1 ? rows : undefined;
      },
      'four saved reports of user 3',
      30_000,
      50,
    );
    const grantOrder = results3.map((row) => row.priority);
    check(
      JSON.stringify(grantOrder) === '[0,10,5,1]',
      `grants should go 0, 10, 5, 1 by fencing token, went ${grantOrder.join(', ')}`,
    );
    line('db', 'job_result for user 3 in fencing-token order: priorities 0, 10, 5, 1');

    // Nothing left behind: every lease released, every waiter row gone.
    await until(async () => {
      const { rows } = await db.query<{ n: number }>(
        `SELECT (SELECT count(*) FROM job_lease WHERE lease_token IS NOT NULL)
          + (SELECT count(*) FROM job_lease_waiter) AS n`,
      );
      return Number(rows[0].n) === 0 ? true : undefined;
    }, 'all leases released');
    const all = await db.query<{ user_id: number; fencing_token: string; instance: string; priority: number }>(
      'SELECT user_id, fencing_token, instance, priority FROM job_result ORDER BY fencing_token',
    );
    print('\njob_result (every committed save; no stale token ever committed):');
    // Fencing tokens are (timeline << 47) | sequence value (from 2^40): 141836999983104 is the first of timeline 1.
    print('  user            token  instance  priority');
    for (const row of all.rows)
      print(
        `  ${String(row.user_id).padStart(4)}  ${row.fencing_token.padStart(15)}  ${row.instance.padEnd(8)}  ${String(row.priority).padStart(8)}`,
      );
    return {
      duplicate: { first, again, otherInstance },
      kill: {
        victimToken,
        takeoverToken: kill.token,
        refusedBeforeTakeover: kill.refused,
        takeoverAfterMs: kill.afterMs,
      },
      stale: { staleToken, takeoverToken: stale.token, discardedDetail: discarded.detail },
      priority: { holderToken, queued, grantOrder },
    };
  } finally {
    await db.end();
  }
}

async function main(): Promise<void> {
  const began = performance.now();
  const line = timeline(console.log, began);
  const server = await startPostgres();
  let databaseUrl: string | undefined;
  let stack: DemoStack | undefined;
  let code = 1;
  const cleanUp = async () => {
    await stack?.stop();
    if (databaseUrl) await dropDatabase(server.url, databaseUrl).catch(() => undefined);
    await server.destroy();
  };
  process.once('SIGINT', () => {
    console.error('\nInterrupted: stopping everything the tour started');
    void cleanUp().finally(() => process.exit(130));
  });
  try {
    databaseUrl = await createDatabase(server.url, 'demo_tour');
    line('tour', `PostgreSQL ready (${server.embedded ? 'embedded, throwaway' : 'DATABASE_URL'}), fresh database`);
    stack = await startStack({ databaseUrl });
    line('tour', `scoring API, instances A (${stack.urls.A}) and B (${stack.urls.B}) answering`);
    await runTour(stack, databaseUrl, { startedAt: began });
    console.log(`\nTour passed in ${((performance.now() - began) / 1000).toFixed(1)} s.`);
    code = 0;
  } catch (error) {
    console.error(`\nTour FAILED: ${error instanceof Error ? error.message : String(error)}`);
    if (stack) console.error(`\nLast output of the processes:\n${stack.output()}`);
  } finally {
    await cleanUp();
  }
  process.exit(code);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
