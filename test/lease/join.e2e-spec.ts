import {
  LeaseArgumentError,
  LeaseDrainedError,
  LeaseJoinedRunError,
  LeaseOperator,
  LeaseWaitTimeoutError,
  type LeaseEvent,
} from 'nest-pg-lease';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { joinersWaiting, mergeLeaseOptions } from '../../libs/lease/src/internal.js';
import { eventually, type OpenedService, useTestDatabase } from '../support/db.js';
import { startChild, type TestChild } from '../support/processes.js';

const CHILD = fileURLToPath(new URL('./support/join-child.ts', import.meta.url));

/** A promise opened from outside. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

/**
 * onBusy: 'join' (issue 24): a call whose target is held by a run of the same key settles with that run's outcome —
 * the same value, or a LeaseJoinedRunError — instead of LeaseBusyError.
 */
describe("onBusy: 'join' in one process", () => {
  const db = useTestDatabase('join');
  let a: OpenedService;

  beforeAll(async () => {
    a = await db.open({ owner: 'a' });
  });

  test('the duplicate shares the running call: the work runs once, both get the same value', async () => {
    const key = 'join:value';
    const g = gate();
    let runs = 0;
    const events: LeaseEvent[] = [];
    const sub = a.service.events$.subscribe((event) => events.push(event));
    const work = async () => {
      runs += 1;
      await g.opened;
      return { report: 42, token: String(a.service.current()?.fencingToken) };
    };
    const first = a.service.run(key, work, { onBusy: 'join' });
    const second = a.service.run(key, work, { onBusy: 'join' });
    g.open();
    const [one, two] = await Promise.all([first, second]);
    sub.unsubscribe();
    expect(runs).toBe(1);
    expect(two).toEqual(one);
    // The duplicate asked the database nothing: no busy refusal, one acquisition.
    expect(events.filter((event) => event.type === 'busy')).toEqual([]);
    expect(events.filter((event) => event.type === 'acquired')).toHaveLength(1);
    expect(a.service.heldLeases()).toEqual([]);
  });

  test("a failed run: the duplicate gets a LeaseJoinedRunError with the original's message and cause", async () => {
    const key = 'join:error';
    const g = gate();
    const original = new Error('the report service is down');
    const work = async () => {
      await g.opened;
      throw original;
    };
    const first = a.service.run(key, work, { onBusy: 'join' }).catch((error: unknown) => error);
    const second = a.service.run(key, work, { onBusy: 'join' }).catch((error: unknown) => error);
    g.open();
    expect(await first).toBe(original);
    const joined = await second;
    expect(joined).toBeInstanceOf(LeaseJoinedRunError);
    expect((joined as LeaseJoinedRunError).message).toBe('the report service is down');
    expect((joined as LeaseJoinedRunError).cause).toBe(original);
    expect((joined as LeaseJoinedRunError).targetKey).toBe(key);
    expect(typeof (joined as LeaseJoinedRunError).fencingToken).toBe('bigint');
  });

  test('joinTimeoutMs bounds the join (LeaseWaitTimeoutError); the run itself goes on', async () => {
    const key = 'join:timeout';
    const g = gate();
    const first = a.service.run(key, () => g.opened.then(() => 'done'), { onBusy: 'join' });
    await expect(a.service.run(key, () => 'never', { onBusy: { join: { timeoutMs: 100 } } })).rejects.toBeInstanceOf(
      LeaseWaitTimeoutError,
    );
    g.open();
    await expect(first).resolves.toBe('done');
  });

  test("the caller's signal ends the join with its reason", async () => {
    const key = 'join:signal';
    const g = gate();
    const first = a.service.run(key, () => g.opened.then(() => 'done'), { onBusy: 'join' });
    const controller = new AbortController();
    const second = a.service.run(key, () => 'never', { onBusy: 'join', signal: controller.signal });
    const reason = new Error('client gone');
    controller.abort(reason);
    await expect(second).rejects.toBe(reason);
    g.open();
    await expect(first).resolves.toBe('done');
  });

  test.each([
    ['a BigInt', () => 1n],
    ['a function', () => () => 1],
    [
      'a cycle',
      () => {
        const cycle: Record<string, unknown> = {};
        cycle.self = cycle;
        return cycle;
      },
    ],
  ])(
    'a value that is not JSON (%s) is refused at the call: LeaseArgumentError, the duplicate hears it',
    async (_, value) => {
      const key = `join:not-json:${_}`;
      const g = gate();
      const work = async () => {
        await g.opened;
        return value();
      };
      const first = a.service.run(key, work, { onBusy: 'join' }).catch((error: unknown) => error);
      const second = a.service.run(key, work, { onBusy: 'join' }).catch((error: unknown) => error);
      g.open();
      const refused = await first;
      expect(refused).toBeInstanceOf(LeaseArgumentError);
      expect((refused as Error).message).toMatch(/JSON/);
      const joined = await second;
      expect(joined).toBeInstanceOf(LeaseJoinedRunError);
      expect((joined as Error).message).toBe((refused as Error).message);
    },
  );

  test.each([
    ['a joinable run', { onBusy: 'join' as const }],
    ['a plain run', {}],
  ])(
    'a join inside %s of the same key is reentrant: the work runs in the outer lease, no wait for its own outcome',
    async (_, outer) => {
      const key = `join:reentrant:${Object.keys(outer).length}`;
      const tokens: bigint[] = [];
      const value = await a.service.run(
        key,
        (lease) => {
          tokens.push(lease.fencingToken);
          return a.service.run(
            key,
            (inner) => {
              tokens.push(inner.fencingToken);
              return 'inner';
            },
            { onBusy: { join: { timeoutMs: 5_000 } } },
          );
        },
        outer,
      );
      expect(value).toBe('inner');
      expect(tokens).toHaveLength(2);
      expect(tokens[1]).toBe(tokens[0]);
    },
  );

  test('bad join options are refused before anything is written', async () => {
    await expect(a.service.run('join:bad', () => 1, { onBusy: 'skip' as never })).rejects.toBeInstanceOf(
      LeaseArgumentError,
    );
    await expect(a.service.run('join:bad', () => 1, { onBusy: { join: { timeoutMs: -1 } } })).rejects.toBeInstanceOf(
      LeaseArgumentError,
    );
    const rows = await db.admin.query(`SELECT 1 FROM job_lease WHERE target_id = 'join:bad'`);
    expect(rows.rowCount).toBe(0);
  });
});

/**
 * Across processes: the holder's outcome is stored (JSON, keyed by target and fencing token, in its fenced
 * transaction) and the joiners are woken by NOTIFY, with a poll as the safety net.
 */
describe("onBusy: 'join' across processes", () => {
  const db = useTestDatabase('join_remote');
  let a: OpenedService;
  let b: OpenedService;
  const children: TestChild[] = [];

  beforeAll(async () => {
    // Slower heartbeats than FAST: a loaded machine must not make a holder lose its lease mid-test.
    const timings = { timing: { heartbeatIntervalMs: 300, leaseTimeoutMs: 3_000 } };
    a = await db.open(mergeLeaseOptions({ owner: 'a' }, timings));
    b = await db.open(mergeLeaseOptions({ owner: 'b', timing: { joinResultTtlMs: 300 } }, timings));
  });

  afterAll(() => {
    for (const child of children) if (child.process.exitCode === null) child.process.kill('SIGKILL');
  });

  const child = (owner: string, key: string) => {
    const started = startChild(CHILD, { JOIN_CHILD: { url: db.url, owner, key } }, { captureOutput: true });
    children.push(started);
    return started;
  };
  const holds = (key: string) =>
    eventually(
      () => db.admin.query(`SELECT owner FROM job_lease WHERE target_id = $1 AND lease_token IS NOT NULL`, [key]),
      (result) => result.rowCount === 1,
      `a holder of ${key}`,
    );

  test('two processes: the joiner gets the holder’s value, its own work never runs', async () => {
    const key = 'join:children';
    const holder = child('c1', key);
    await holder.message('ready', 30_000);
    const running = await holder.message<{ fencingToken: string }>('running', 30_000);
    const joiner = child('c2', key);
    await joiner.message('ready', 30_000);
    // The joiner is waiting for the holder's outcome (its work has not run): let the holder finish.
    await new Promise((resolve) => setTimeout(resolve, 300));
    holder.process.send('finish');
    const [one, two] = await Promise.all([
      holder.message<{ value: unknown }>('settled', 30_000),
      joiner.message<{ value: unknown }>('settled', 30_000),
    ]);
    expect(one.value).toEqual({ by: 'c1', fencingToken: running.fencingToken });
    expect(two.value).toEqual(one.value);
    await expect(joiner.message('running', 10)).rejects.toThrow();
  });

  test('a failed run reaches the other process as LeaseJoinedRunError with its message', async () => {
    const key = 'join:remote-error';
    const g = gate();
    const first = a.service
      .run(
        key,
        async () => {
          await g.opened;
          throw new Error('upstream said no');
        },
        { onBusy: 'join' },
      )
      .catch((error: unknown) => error);
    await holds(key);
    const second = b.service.run(key, () => 'never', { onBusy: 'join' }).catch((error: unknown) => error);
    await eventually(
      () => joinersWaiting(b.service, key),
      (n) => n === 1,
      'b to join',
    );
    g.open();
    expect(((await first) as Error).message).toBe('upstream said no');
    const joined = (await second) as LeaseJoinedRunError;
    expect(joined).toBeInstanceOf(LeaseJoinedRunError);
    expect(joined.message).toBe('upstream said no');
    expect(joined.cause).toEqual({ name: 'Error', message: 'upstream said no' });
  });

  test('a value that is not JSON: the holder is refused, the other process hears the refusal', async () => {
    const key = 'join:remote-bigint';
    const g = gate();
    const first = a.service
      .run(key, () => g.opened.then(() => ({ n: 1n })), { onBusy: 'join' })
      .catch((error: unknown) => error);
    await holds(key);
    const second = b.service.run(key, () => 'never', { onBusy: 'join' }).catch((error: unknown) => error);
    await eventually(
      () => joinersWaiting(b.service, key),
      (n) => n === 1,
      'b to join',
    );
    g.open();
    expect(await first).toBeInstanceOf(LeaseArgumentError);
    const joined = (await second) as Error;
    expect(joined).toBeInstanceOf(LeaseJoinedRunError);
    expect(joined.message).toBe(((await first) as Error).message);
  });

  test('results expire after joinResultTtlMs and later saves delete them', async () => {
    await b.service.run('join:ttl:1', () => ({ first: true }), { onBusy: 'join' });
    const stored = await db.admin.query(`SELECT outcome FROM job_lease_result WHERE target_id = 'join:ttl:1'`);
    expect(JSON.parse(stored.rows[0].outcome)).toEqual({ kind: 'value', value: { first: true } });
    await new Promise((resolve) => setTimeout(resolve, 500));
    await b.service.run('join:ttl:2', () => ({ second: true }), { onBusy: 'join' });
    const left = await db.admin.query(`SELECT target_id FROM job_lease_result WHERE target_id LIKE 'join:ttl:%'`);
    expect(left.rows.map((row) => row.target_id)).toEqual(['join:ttl:2']);
  });

  test('the holder killed (SIGKILL) while joined: the joiner takes the lease and runs the work under a new token', async () => {
    const key = 'join:killed';
    const holder = child('doomed', key);
    const running = await holder.message<{ fencingToken: string }>('running', 30_000);
    let ran: bigint | undefined;
    const joined = b.service.run(
      key,
      (lease) => {
        ran = lease.fencingToken;
        return { by: 'b' };
      },
      { onBusy: { join: { timeoutMs: 20_000 } } },
    );
    await eventually(
      () => joinersWaiting(b.service, key),
      (n) => n === 1,
      'b to join the doomed holder',
    );
    holder.process.kill('SIGKILL');
    await expect(joined).resolves.toEqual({ by: 'b' });
    expect(ran! > BigInt(running.fencingToken)).toBe(true);
    expect((await db.admin.query(`SELECT 1 FROM job_lease WHERE lease_token IS NOT NULL`)).rowCount).toBe(0);
  });
});

/**
 * Counts the statements every pg client of this test process sends (the services' pools, heartbeats and LISTEN
 * connections alike) from now until `stop()`: how many a wait costs, whatever the server's statistics lag.
 */
function countStatements(): { count: () => number; stop: () => void } {
  const query = pg.Client.prototype.query;
  let count = 0;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    count += 1;
    return (query as (...rest: unknown[]) => unknown).apply(this, args);
  } as typeof query;
  return { count: () => count, stop: () => (pg.Client.prototype.query = query) };
}

/**
 * Issue 38 items 6 and 7: a join meets the key's other states. A drained key refuses a join as it refuses any call; a
 * join only ever settles with the outcome of the run that held the key when it joined (or of a later one), never with
 * one that had ended before it came — a hold's tail is no run to join; and a join that finds no run to join waits (its
 * NOTIFY, its poll, the tail's end) instead of asking the database in a loop.
 */
describe("onBusy: 'join' meets drains and hold tails", () => {
  const db = useTestDatabase('join_seams');
  let a: OpenedService;
  let b: OpenedService;

  beforeAll(async () => {
    // A second-long poll (not FAST's 200 ms): what a wait costs is counted below; slow heartbeats for a loaded machine.
    const timings = { timing: { heartbeatIntervalMs: 300, leaseTimeoutMs: 3_000, waitPollIntervalMs: 1_000 } };
    a = await db.open(mergeLeaseOptions({ owner: 'a' }, timings));
    b = await db.open(mergeLeaseOptions({ owner: 'b' }, timings));
  });

  const joinedRun = async (service: OpenedService, key: string, by: string) => {
    let ran: bigint | undefined;
    const value = await service.service.run(
      key,
      (lease) => {
        ran = lease.fencingToken;
        return { by };
      },
      { onBusy: { join: { timeoutMs: 20_000 } } },
    );
    return { value, ran };
  };
  /** When the key's row was last acquired, and when that acquisition's hold ends (database clock). */
  const acquisition = async (key: string) => {
    const { rows } = await db.admin.query<{ acquired: Date; tailEnd: Date }>(
      `SELECT acquired_at AS acquired, acquired_at + hold_ms * interval '1 millisecond' AS "tailEnd"
       FROM job_lease WHERE target_id = $1`,
      [key],
    );
    return rows[0];
  };

  test.each([
    ['in the process that drained it', () => a],
    ['in another process', () => b],
  ])("a drained key refuses a join at once (%s), never with an earlier run's stored outcome", async (_, joiner) => {
    const key = `seam:drained:${joiner().service.options.owner}`;
    await expect(a.service.run(key, () => ({ by: 'earlier' }), { onBusy: 'join' })).resolves.toEqual({
      by: 'earlier',
    });
    const operator = new LeaseOperator(a.service);
    // A probe key drained after it: the joining process sees the key's drain once it refuses the probe (it reads the
    // drains every second), and the probe's acquisitions leave the key's row as the earlier run left it.
    const probe = `${key}:probe`;
    await operator.drain(key, { by: 'ops', reason: 'incident' });
    await operator.drain(probe, { by: 'ops', reason: 'incident' });
    try {
      await eventually(
        () =>
          joiner()
            .service.tryAcquire(probe)
            .then(
              (lease) => lease?.release().then(() => null) ?? null,
              (error: unknown) => error,
            ),
        (refusal) => refusal instanceof LeaseDrainedError,
        'the drain seen by the joining process',
      );
      let ran = false;
      const started = performance.now();
      const joined = joiner().service.run(key, () => (ran = true), { onBusy: { join: { timeoutMs: 10_000 } } });
      await expect(joined).rejects.toBeInstanceOf(LeaseDrainedError);
      await expect(joined).rejects.toMatchObject({ drainKind: 'key', drainReason: 'incident', targetKey: key });
      expect(performance.now() - started).toBeLessThan(2_000);
      expect(ran).toBe(false);
    } finally {
      await operator.undrain(key, { by: 'ops', reason: 'over' });
      await operator.undrain(probe, { by: 'ops', reason: 'over' });
    }
  });

  test('a drained template refuses a join at once, where no outcome was ever stored (no wait until joinTimeoutMs)', async () => {
    const operator = new LeaseOperator(a.service);
    await operator.drain('seam:tpl:{id}', { by: 'ops', reason: 'migration', template: true });
    try {
      const started = performance.now();
      const refusal = await a.service
        .run('seam:tpl:1', () => 'never', { onBusy: { join: { timeoutMs: 5_000 } }, keyTemplate: 'seam:tpl:{id}' })
        .catch((error: unknown) => error);
      expect(refusal).toBeInstanceOf(LeaseDrainedError);
      expect(refusal).toMatchObject({ drainKind: 'template' });
      expect(performance.now() - started).toBeLessThan(2_000);
    } finally {
      await operator.undrain('seam:tpl:{id}', { by: 'ops', reason: 'over', template: true });
    }
  });

  test.each([
    ['the same process', () => a],
    ['another process', () => b],
  ])(
    "a join in a finished joinable run's hold tail (%s) waits for the tail and runs the work itself",
    async (_, joiner) => {
      const key = `seam:tail:${joiner().service.options.owner}`;
      let first: bigint | undefined;
      const earlier = await a.service.run(
        key,
        (lease) => {
          first = lease.fencingToken;
          return { by: 'earlier' };
        },
        { onBusy: 'join', holdAtLeastMs: 1_500 },
      );
      expect(earlier).toEqual({ by: 'earlier' });
      // The earlier run's outcome is stored, and its tail keeps the key taken for about 1.5 s more.
      const stored = await db.admin.query(`SELECT 1 FROM job_lease_result WHERE target_id = $1`, [key]);
      expect(stored.rowCount).toBe(1);
      const { tailEnd } = await acquisition(key);
      const { value, ran } = await joinedRun(joiner(), key, 'joiner');
      expect(value).toEqual({ by: 'joiner' });
      expect(ran! > first!).toBe(true);
      expect((await acquisition(key)).acquired.getTime()).toBeGreaterThanOrEqual(tailEnd.getTime());
    },
  );

  test("a join in a plain run's hold tail waits with a bounded number of statements, then runs the work itself", async () => {
    const key = 'seam:plain-tail';
    const plain = (await a.service.tryAcquire(key, { holdAtLeastMs: 3_000 }))!;
    await plain.release();
    const { tailEnd } = await acquisition(key);
    const counter = countStatements();
    let counted: number;
    let joined: ReturnType<typeof joinedRun>;
    try {
      joined = joinedRun(b, key, 'b');
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      counted = counter.count();
    } finally {
      counter.stop();
    }
    const { value, ran } = await joined;
    expect((await acquisition(key)).acquired.getTime()).toBeGreaterThanOrEqual(tailEnd.getTime());
    // Refused acquisitions in a loop sent thousands in these 2 s; a wait sends a handful (its reads, the drain reads).
    expect(counted).toBeLessThan(50);
    expect(value).toEqual({ by: 'b' });
    expect(ran! > plain.fencingToken).toBe(true);
  });
});
