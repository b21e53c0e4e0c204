/**
 * What the group-commit prototype must prove before part 2 moves it into the library, checked against a real
 * PostgreSQL (DATABASE_URL, else an embedded one): `npm run bench:prototype-check`. Each check prints PASS or FAIL;
 * the exit code is the number of failures. Part 2 turns these into e2e specs under test/.
 *
 * - per-key rules inside one batch: first-ever insert, soft-released row, expired takeover, held, hold tail,
 *   live waiter ahead, dead waiter cleaned up, a granted waiter's own row deleted;
 * - a duplicate key inside one batch: exactly one winner, the one the no-barging rule prefers;
 * - one bad row (a trigger that raises for one key, a key over 255 bytes) fails only its own caller;
 * - a row locked by another transaction (a stalled statement) never stalls the rest of a batch;
 * - fencing tokens: distinct per row of a batch (also with the timeline layout), strictly increasing per key in the
 *   commit order of fenced writes while batches of several processes overlap on the same keys; no deadlock;
 * - releases: per caller, head-only NOTIFY naming the next waiter, stale tokens touch nothing;
 * - batch size bounded by maxBatch; an idle engine sends a lone call at once.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { createDatabase, dropDatabase, startPostgres } from '@app/pg-harness';
import { LeaseService } from 'nest-pg-lease';
import pg from 'pg';
import { DataSource } from 'typeorm';
import { objectNames, parseHeadPayload } from './batch-statements.js';
import { PrototypeLeases, type PrototypeLease, type PrototypeOptions } from './prototype-leases.js';

const NAMES = { schema: 'public', tableName: 'job_lease', waiterTableName: 'job_lease_waiter' };
const here = dirname(fileURLToPath(import.meta.url));

let failures = 0;
async function check(name: string, body: () => Promise<void>): Promise<void> {
  const started = performance.now();
  try {
    await body();
    console.log(`PASS  ${name} (${Math.round(performance.now() - started)} ms)`);
  } catch (error) {
    failures++;
    console.log(
      `FAIL  ${name}\n      ${String(error instanceof Error ? (error.stack ?? error) : error).replace(/\n/g, '\n      ')}`,
    );
  }
}

async function main(): Promise<void> {
  const server = await startPostgres();
  const url = await createDatabase(server.url, 'proto');
  const db = new pg.Client({ connectionString: url });
  const pools: pg.Pool[] = [];
  const engines: PrototypeLeases[] = [];
  const engine = (options: Partial<PrototypeOptions> = {}, poolSize = 4) => {
    const pool = new pg.Pool({ connectionString: url, max: poolSize });
    pools.push(pool);
    const leases = new PrototypeLeases(pool, { names: NAMES, ...options });
    engines.push(leases);
    return leases;
  };
  /**
   * Starts `work` while a lone statement of the same kind (an acquisition, or with `release` a release) of an unrelated
   * key is in flight, so all of `work` lands in one batch.
   */
  const inOneBatch = async <T>(
    leases: PrototypeLeases,
    work: () => Promise<T>[],
    release?: PrototypeLease,
  ): Promise<T[]> => {
    const opener = release ? leases.release(release) : leases.tryAcquire(`opener:${randomUUID()}`);
    const results = Promise.allSettled(work());
    await opener;
    return (await results).map((result) => {
      if (result.status === 'rejected') throw result.reason;
      return result.value;
    });
  };
  const row = async (key: string) =>
    (await db.query('SELECT lease_token::text, fencing_token::text, owner FROM job_lease WHERE target_id = $1', [key]))
      .rows[0];

  try {
    await db.connect();
    const setup = new DataSource({ type: 'postgres', url, extra: { max: 1 } });
    await setup.initialize();
    const service = new LeaseService(setup, { createSchema: true });
    await service.init();
    await service.close();
    await setup.destroy();
    await db.query('CREATE SEQUENCE proto_history_seq');
    await db.query('CREATE TABLE proto_history (target_id text, fencing_token bigint, owner text, seq bigint)');

    await check(
      'per-key rules inside one batch (insert, released, expired takeover, held, hold tail, waiters)',
      async () => {
        const other = engine({ owner: 'other' });
        const leases = engine({ owner: 'batcher' });
        const tag = randomUUID().slice(0, 8);
        const k = (name: string) => `${tag}:${name}`;
        // released: acquired and released by another engine; expired: held by another, then aged past its timeout.
        await other.release((await other.tryAcquire(k('released')))!);
        await other.tryAcquire(k('expired'));
        await db.query(`UPDATE job_lease SET updated_at = now() - interval '1 hour' WHERE target_id = $1`, [
          k('expired'),
        ]);
        await other.tryAcquire(k('held'));
        await other.release((await other.tryAcquire(k('tail'), { holdAtLeastMs: 60_000 }))!);
        // A live waiter of another process ahead of newcomers; a dead waiter that must not block, and is removed.
        for (const [key, alive] of [
          [k('ahead'), true],
          [k('dead'), false],
        ] as const) {
          await db.query(
            `INSERT INTO job_lease_waiter (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
           VALUES ($1, $2, 'other', 0, 60000, now(), nextval('job_lease_waiter_seq'), now() - $3 * interval '1 hour')`,
            [key, randomUUID(), alive ? 0 : 2],
          );
        }
        const names = ['fresh', 'released', 'expired', 'held', 'tail', 'ahead', 'dead'];
        const got = await inOneBatch(leases, () => names.map((name) => leases.tryAcquire(k(name))));
        const byName = Object.fromEntries(names.map((name, i) => [name, got[i]]));
        assert.ok(byName.fresh, 'a key never acquired is won (INSERT)');
        assert.ok(byName.released && !byName.released.tookOver, 'a released row is won, not a takeover');
        assert.ok(byName.expired?.tookOver, 'an expired row is taken over');
        assert.equal(byName.held, null, 'a held key is refused');
        assert.equal(byName.tail, null, 'a released key inside its hold is refused');
        assert.equal(byName.ahead, null, 'a live waiter ahead refuses a newcomer');
        assert.ok(byName.dead, 'a dead waiter does not block');
        const { rows } = await db.query('SELECT count(*)::int AS n FROM job_lease_waiter WHERE target_id = $1', [
          k('dead'),
        ]);
        assert.equal(rows[0].n, 0, 'the dead waiter row went with the grant');
        for (const name of ['fresh', 'released', 'expired', 'dead']) {
          assert.equal(
            (await row(k(name))).lease_token,
            byName[name]!.token,
            `${name}: the row carries the winner's token`,
          );
        }
        assert.ok(
          leases.stats().acquire.largest >= names.length,
          `all in one batch (largest ${leases.stats().acquire.largest})`,
        );
        // A granted waiter's own row goes with its grant (through the engine's wait).
        const holder = await other.tryAcquire(k('queue'));
        const waiting = leases.acquire(k('queue'), { waitTimeoutMs: 10_000 });
        await eventually(
          async () =>
            (await db.query('SELECT 1 FROM job_lease_waiter WHERE target_id = $1', [k('queue')])).rowCount === 1,
        );
        await other.release(holder!);
        const granted = await waiting;
        assert.equal((await row(k('queue'))).lease_token, granted.token);
        assert.equal((await db.query('SELECT 1 FROM job_lease_waiter WHERE target_id = $1', [k('queue')])).rowCount, 0);
      },
    );

    await check('a duplicate key inside one batch has exactly one winner, the highest priority', async () => {
      const leases = engine();
      const key = `dup:${randomUUID()}`;
      const priorities = Array.from({ length: 20 }, (_, i) => (i === 13 ? 5 : 0));
      const before = leases.stats().acquire.largest;
      const got = await inOneBatch(leases, () => priorities.map((priority) => leases.tryAcquire(key, { priority })));
      const winners = got.flatMap((lease, i) => (lease ? [i] : []));
      assert.deepEqual(winners, [13], 'one winner: the caller with priority 5');
      assert.ok(leases.stats().acquire.largest >= 20 || before >= 20, 'the 20 callers shared one statement');
      assert.equal((await row(key)).lease_token, got[13]!.token);
    });

    await check('one bad row fails only its own caller (a trigger that raises, a key over 255 bytes)', async () => {
      const leases = engine();
      await db.query(`CREATE FUNCTION proto_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'refused by the check for %', NEW.target_id USING ERRCODE = 'P0001'; END $$`);
      await db.query(`CREATE TRIGGER proto_refuse BEFORE INSERT OR UPDATE ON job_lease FOR EACH ROW
        WHEN (NEW.target_id LIKE 'bad:%') EXECUTE FUNCTION proto_refuse()`);
      try {
        const tag = randomUUID().slice(0, 8);
        const keys = [`ok:${tag}:1`, `bad:${tag}`, `ok:${tag}:2`, `long:${'x'.repeat(300)}`, `ok:${tag}:3`];
        const splits = leases.stats().acquire.splits;
        const settled = await inOneBatch(leases, () =>
          keys.map((key) =>
            leases.tryAcquire(key).then(
              (lease) => ({ lease }),
              (error: unknown) => ({ error }),
            ),
          ),
        );
        assert.ok(leases.stats().acquire.splits > splits, 'the failed batch was split');
        for (const i of [0, 2, 4]) assert.ok('lease' in settled[i] && settled[i].lease, `${keys[i]} is won`);
        assert.match(String((settled[1] as { error: unknown }).error), /refused by the check/);
        assert.equal((settled[3] as { error: { code: string } }).error.code, '23514', 'the CHECK on the key length');
      } finally {
        await db.query('DROP TRIGGER proto_refuse ON job_lease');
        await db.query('DROP FUNCTION proto_refuse()');
      }
    });

    await check('a row locked by a stalled transaction never stalls the rest of the batch', async () => {
      const leases = engine();
      const tag = randomUUID().slice(0, 8);
      const stalled = `stalled:${tag}`;
      await leases.release((await leases.tryAcquire(stalled))!);
      // Another session locks the (free) row and sits on it for 3 s, as a slow transaction or a stuck statement would.
      const blocker = new pg.Client({ connectionString: url });
      await blocker.connect();
      await blocker.query('BEGIN');
      await blocker.query('SELECT 1 FROM job_lease WHERE target_id = $1 FOR UPDATE', [stalled]);
      const unlock = setTimeout(() => void blocker.query('COMMIT'), 3_000);
      try {
        const started = performance.now();
        const others = [1, 2, 3].map((i) => `free:${tag}:${i}`);
        const opener = leases.tryAcquire(`opener:${randomUUID()}`);
        const lockedOne = leases.tryAcquire(stalled);
        const rest = Promise.all(others.map((key) => leases.tryAcquire(key)));
        await opener;
        const won = await rest;
        const restMs = performance.now() - started;
        assert.ok(won.every(Boolean), 'the other keys are won');
        assert.ok(restMs < 2_000, `the other keys did not wait for the locked row (${Math.round(restMs)} ms)`);
        // The locked key went the single path: it waited for the lock, then won the free row.
        const late = await lockedOne;
        assert.ok(late, 'the stalled key is won once the lock is gone');
        assert.ok(performance.now() - started >= 2_500, 'and only then');
      } finally {
        clearTimeout(unlock);
        await blocker.query('COMMIT').catch(() => undefined);
        await blocker.end();
      }
    });

    await check('fencing tokens are distinct within a batch, also with the timeline layout', async () => {
      for (const tokenLayout of ['plain', 'timeline'] as const) {
        const leases = engine({ tokenLayout });
        const tag = randomUUID().slice(0, 8);
        const got = await inOneBatch(leases, () =>
          Array.from({ length: 40 }, (_, i) => leases.tryAcquire(`tok:${tag}:${i}`)),
        );
        const tokens = got.map((lease) => lease!.fencingToken);
        assert.equal(new Set(tokens.map(String)).size, 40, `${tokenLayout}: 40 distinct tokens`);
        if (tokenLayout === 'timeline')
          assert.ok(
            tokens.every((token) => token >> 40n >= 1n),
            'the timeline is in the high bits',
          );
      }
    });

    await check('releases: per caller, stale tokens touch nothing, the NOTIFY names the next waiter', async () => {
      const leases = engine({ headOnly: true });
      const other = engine({ headOnly: true });
      const listener = new pg.Client({ connectionString: url });
      await listener.connect();
      const heard: string[] = [];
      listener.on('notification', (message) => heard.push(message.payload ?? ''));
      await listener.query(`LISTEN "${objectNames(NAMES).headChannel}"`);
      try {
        const tag = randomUUID().slice(0, 8);
        const held = await Promise.all([1, 2, 3].map((i) => leases.tryAcquire(`rel:${tag}:${i}`)));
        const stale: PrototypeLease = { ...held[1]!, token: randomUUID() };
        const waiterId = randomUUID();
        await db.query(
          `INSERT INTO job_lease_waiter (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
           VALUES ($1, $2, 'other', 0, 60000, now(), nextval('job_lease_waiter_seq'), now())`,
          [`rel:${tag}:3`, waiterId],
        );
        const opener = await leases.tryAcquire(`rel:${tag}:opener`);
        const batches = leases.stats().release.batches;
        const released = await inOneBatch(
          leases,
          () => [leases.release(held[0]!), leases.release(stale), leases.release(held[2]!), leases.release(held[0]!)],
          opener!,
        );
        assert.equal(leases.stats().release.batches, batches + 2, 'the opener, then one batch of four');
        assert.deepEqual(
          released,
          [true, false, true, true],
          'ours released (twice: idempotent in one batch), the stale one not',
        );
        assert.equal((await row(`rel:${tag}:2`)).lease_token, held[1]!.token, 'the stale token touched nothing');
        await eventually(() => Promise.resolve(heard.length > 0));
        assert.deepEqual(
          heard.map((payload) => parseHeadPayload(payload)),
          [{ waiterId, targetKey: `rel:${tag}:3` }],
          'one NOTIFY, naming the head waiter of the key that has one',
        );
        void other;
      } finally {
        await listener.end();
      }
    });

    await check('batch size is bounded by maxBatch; an idle engine sends a lone call at once', async () => {
      const leases = engine({ maxBatch: 32 });
      const tag = randomUUID().slice(0, 8);
      await leases.tryAcquire(`idle:${tag}`);
      assert.deepEqual(leases.stats().acquire, { batches: 1, items: 1, largest: 1, splits: 0 });
      await Promise.all(Array.from({ length: 300 }, (_, i) => leases.tryAcquire(`bound:${tag}:${i}`)));
      assert.ok(leases.stats().acquire.largest <= 32, `largest batch ${leases.stats().acquire.largest}`);
      assert.ok(leases.stats().acquire.largest > 1, 'and batches formed');
    });

    await check('overlapping batches of 4 processes on 24 shared keys: token order per key, no deadlock', async () => {
      const deadlocks = async () =>
        Number(
          (await db.query(`SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`)).rows[0]
            .deadlocks,
        );
      const before = await deadlocks();
      const reports = await Promise.all(['p1', 'p2', 'p3', 'p4'].map((name) => worker(url, name, 12, 24, 6_000)));
      for (const report of reports) assert.deepEqual(report.errors, [], `${report.name}: no errors`);
      const granted = reports.reduce((sum, report) => sum + report.granted, 0);
      const fenced = reports.reduce((sum, report) => sum + report.fenced, 0);
      assert.ok(granted > 100, `enough grants to mean something (${granted})`);
      assert.equal(fenced, granted, 'every holder could write inside its fence: no two holders at once');
      assert.ok(
        reports.every((report) => report.stats.acquire.largest > 1),
        'every process sent multi-caller batches',
      );
      const violations = async (table: string) =>
        (
          await db.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM (
               SELECT fencing_token <= lag(fencing_token) OVER (PARTITION BY target_id ORDER BY seq) AS back FROM ${table}
             ) h WHERE back`,
          )
        ).rows[0].n;
      assert.equal(
        await violations('proto_history'),
        0,
        'no fenced write with a token not larger than the one before it',
      );
      // Negative control: the same query on a history with one token going back must see it.
      await db.query('CREATE TEMP TABLE proto_history_bad AS SELECT * FROM proto_history');
      await db.query(`INSERT INTO proto_history_bad
        SELECT target_id, fencing_token - 1, 'control', seq + 1 FROM proto_history ORDER BY seq DESC LIMIT 1`);
      assert.equal(await violations('proto_history_bad'), 1, 'the checker sees a token that goes back');
      assert.equal(await deadlocks(), before, 'no deadlock detected by the server');
      console.log(
        `      ${granted} grants, ${reports.reduce((s, r) => s + r.refused, 0)} refused, ` +
          `${reports.reduce((s, r) => s + r.stats.retried, 0)} sent alone after a locked row; ` +
          'acquisitions/batches (largest) per process: ' +
          reports
            .map((r) => `${r.stats.acquire.items}/${r.stats.acquire.batches} (${r.stats.acquire.largest})`)
            .join(', '),
      );
    });
  } finally {
    await Promise.all(engines.map((leases) => leases.close()));
    await Promise.all(pools.map((pool) => pool.end()));
    await db.end();
    await dropDatabase(server.url, url).catch(() => undefined);
    await server.destroy();
  }
}

async function eventually(condition: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const until = performance.now() + timeoutMs;
  while (!(await condition())) {
    if (performance.now() > until) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

interface WorkerReport {
  name: string;
  granted: number;
  refused: number;
  fenced: number;
  fenceRefused: number;
  released: number;
  errors: string[];
  stats: ReturnType<PrototypeLeases['stats']>;
}

async function worker(
  url: string,
  name: string,
  clients: number,
  keys: number,
  durationMs: number,
): Promise<WorkerReport> {
  const child = spawn(
    process.execPath,
    [
      '--import',
      import.meta.resolve('tsx'),
      join(here, 'check-worker.ts'),
      url,
      name,
      String(clients),
      String(keys),
      String(durationMs),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let report: WorkerReport | undefined;
  for await (const line of createInterface({ input: child.stdout })) {
    if (line.startsWith('{')) report = JSON.parse(line) as WorkerReport;
  }
  const [code] = (await (child.exitCode === null ? once(child, 'exit') : [child.exitCode])) as [number];
  if (code !== 0 || !report) throw new Error(`worker ${name} exited with code ${code}`);
  return report;
}

main().then(
  () => process.exit(failures),
  (error: unknown) => {
    console.error(error);
    process.exit(100);
  },
);
