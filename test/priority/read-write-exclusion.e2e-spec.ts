/**
 * Read-write exclusion under concurrency (docs/read-write.md): three processes, three loops each, readers and writers
 * of one key arriving together for a few seconds. Each holder makes two fenced writes, a little apart: the first
 * records when it began (database clock), the second when it ended. The history must show no writer's interval
 * overlapping any other holder's — the races the model test (sequential steps) cannot make: a reader granted while a
 * writer's statement is between its snapshot and its row locks, and the other way round.
 *
 * Its negative control: the same workload with a test-only statement fault that lets a reader in beside a writer
 * (`readerBesideWriter`, store/sql/statement-faults.ts) must show overlaps.
 */
import { Logger } from '@nestjs/common';
import type { Lease, LeaseService } from 'nest-pg-lease';
import { useStatementFaults } from '../../libs/lease/src/internal.js';
import { useTestDatabase } from '../support/db.js';
import { sleep } from '../support/sleep.js';
import { MODEL_OPTIONS, procsOf } from './helpers.js';

const db = useTestDatabase('rw_exclusion');
const proc = procsOf(db);

interface Workload {
  readonly key: string;
  readonly ms: number;
  readonly faulty: boolean;
}

/** One holder's work: its first fenced write opens its interval, its second closes it. */
async function hold(service: LeaseService, key: string, mode: 'shared' | 'exclusive'): Promise<void> {
  await service.run(
    key,
    async (lease) => {
      const id = await lease.fenced(async (manager) => {
        const rows: Array<{ id: number }> = await manager.query(
          `INSERT INTO rw_history (key, mode, token, started) VALUES ($1, $2, $3, clock_timestamp()) RETURNING id`,
          [key, mode, lease.fencingToken.toString()],
        );
        return rows[0].id;
      });
      await sleep(5 + Math.floor(Math.random() * 15));
      await lease.fenced((manager) =>
        manager.query(`UPDATE rw_history SET ended = clock_timestamp() WHERE id = $1`, [id]),
      );
    },
    // Half the readers outrank the writers: they pass waiting writers, so they also arrive while a writer holds.
    { mode, priority: mode === 'shared' ? Math.floor(Math.random() * 2) : 0, onBusy: { wait: { timeoutMs: 20_000 } } },
  );
}

/** Runs the workload; the overlaps of the history (a writer's interval meeting any other holder's). */
async function run({ key, ms, faulty }: Workload): Promise<{ overlaps: number; readers: number; writers: number }> {
  const procs = [];
  for (const name of ['a', 'b', 'c']) procs.push(await proc(`${name}-${key}`, MODEL_OPTIONS, 6));
  if (faulty)
    for (const p of procs) useStatementFaults(p.service, { tokenBeforeLock: false, readerBesideWriter: true });
  // At least `ms`, and on until enough holders of each mode finished (a loaded machine runs fewer per second), at most
  // 30 s: the assertions below count holders, not seconds.
  const started = Date.now();
  const done = { shared: 0, exclusive: 0 };
  const more = () =>
    Date.now() < started + ms || ((done.shared <= 24 || done.exclusive <= 8) && Date.now() < started + 30_000);
  await Promise.all(
    procs.flatMap((p) =>
      [0, 1, 2].map(async () => {
        while (more()) {
          const mode = Math.random() < 0.7 ? 'shared' : 'exclusive';
          await hold(p.service, key, mode).then(
            () => done[mode]++,
            () => undefined,
          );
        }
      }),
    ),
  );
  const { rows } = await db.admin.query<{ overlaps: number; readers: number; writers: number }>(
    `SELECT (SELECT count(*) FROM rw_history a JOIN rw_history b ON a.id <> b.id AND b.key = a.key
          AND a.started < b.ended AND b.started < a.ended
        WHERE a.key = $1 AND a.mode = 'exclusive' AND a.ended IS NOT NULL AND b.ended IS NOT NULL)::int AS overlaps,
      (SELECT count(*) FROM rw_history WHERE key = $1 AND mode = 'shared' AND ended IS NOT NULL)::int AS readers,
      (SELECT count(*) FROM rw_history WHERE key = $1 AND mode = 'exclusive' AND ended IS NOT NULL)::int AS writers`,
    [key],
  );
  return rows[0];
}

beforeAll(async () => {
  Logger.overrideLogger(['error']);
  await db.admin.query(
    `CREATE TABLE rw_history (id serial PRIMARY KEY, key text, mode text, token bigint, started timestamptz,
       ended timestamptz)`,
  );
  // The first process creates the lease tables before the others start together.
  await proc('setup', MODEL_OPTIONS, 1);
});

test('readers never overlap a writer, writers never overlap each other, under concurrent arrivals', async () => {
  const history = await run({ key: 'rw-exclusion', ms: 4_000, faulty: false });
  console.log(`read-write exclusion: ${JSON.stringify(history)}`);
  expect(history.readers).toBeGreaterThan(20);
  expect(history.writers).toBeGreaterThan(5);
  expect(history.overlaps).toBe(0);
}, 90_000);

/** Opens a holder's interval (its first fenced write); the returned function closes it (its second). */
async function interval(lease: Lease, key: string): Promise<() => Promise<unknown>> {
  const id = await lease.fenced(async (manager) => {
    const rows: Array<{ id: number }> = await manager.query(
      `INSERT INTO rw_history (key, mode, token, started) VALUES ($1, $2, $3, clock_timestamp()) RETURNING id`,
      [key, lease.mode, lease.fencingToken.toString()],
    );
    return rows[0].id;
  });
  return () =>
    lease.fenced((manager) => manager.query(`UPDATE rw_history SET ended = clock_timestamp() WHERE id = $1`, [id]));
}

test('negative control: a reader let in beside a writer (a statement fault) is caught as overlaps', async () => {
  const history = await run({ key: 'rw-exclusion-control', ms: 4_000, faulty: true });
  console.log(`read-write exclusion, control: ${JSON.stringify(history)}`);
  // Aimed, whatever the workload's timing: a writer holds, a reader of a higher rank arrives (the fault lets it in).
  const faulty = await proc('control', MODEL_OPTIONS, 4);
  useStatementFaults(faulty.service, { tokenBeforeLock: false, readerBesideWriter: true });
  const key = 'rw-exclusion-aimed';
  const writer = (await faulty.service.tryAcquire(key, { mode: 'exclusive' }))!;
  const reader = await faulty.service.tryAcquire(key, { mode: 'shared', priority: 1 });
  expect(reader).not.toBeNull();
  const closeWriter = await interval(writer, key);
  const closeReader = await interval(reader!, key);
  await closeWriter();
  await closeReader();
  await Promise.all([writer.release(), reader!.release()]);
  const { rows } = await db.admin.query<{ overlaps: number }>(
    `SELECT count(*)::int AS overlaps FROM rw_history a JOIN rw_history b ON a.id <> b.id AND b.key = a.key
       AND a.started < b.ended AND b.started < a.ended WHERE a.key = $1 AND a.mode = 'exclusive'`,
    [key],
  );
  expect(rows[0].overlaps).toBe(1);
}, 60_000);

test('without the fault, the aimed reader is refused while the writer holds', async () => {
  const service = (await proc('aimed', MODEL_OPTIONS, 4)).service;
  const writer = (await service.tryAcquire('rw-exclusion-aimed-clean', { mode: 'exclusive' }))!;
  await expect(service.tryAcquire('rw-exclusion-aimed-clean', { mode: 'shared', priority: 1 })).resolves.toBeNull();
  await writer.release();
});

test('the fault switched on after the statements were prepared takes effect on the same connection', async () => {
  // One pooled connection: the reader's statement is prepared there before the fault, and sent there after it.
  const service = (await proc('switched', MODEL_OPTIONS, 1)).service;
  const key = 'rw-exclusion-switched';
  await (await service.tryAcquire(key, { mode: 'shared' }))!.release();
  useStatementFaults(service, { tokenBeforeLock: false, readerBesideWriter: true });
  const writer = (await service.tryAcquire(key, { mode: 'exclusive' }))!;
  const reader = await service.tryAcquire(key, { mode: 'shared', priority: 1 });
  expect(reader).not.toBeNull();
  await Promise.all([writer.release(), reader!.release()]);
});
