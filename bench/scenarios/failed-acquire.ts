/**
 * A contender trying a key that someone else holds: what a refused attempt costs the database. A plain upsert
 * (`ON CONFLICT … DO UPDATE … WHERE <expired>`) still locks the row, takes a transaction id and writes WAL; the
 * library's read-only pre-check should write nothing.
 */
import { randomUUID } from 'node:crypto';
import { advisory, openAdvisory, openLeases, openPool, openVerrou, seed } from '../support/contenders.js';
import {
  interleaved,
  loops,
  summarize,
  type BenchContext,
  type Contender,
  type Row,
  type Workload,
} from '../support/measure.js';
import { LEASE_IMPLEMENTATIONS } from './acquire-release.js';

const WARM_UP = 5;

export async function failedAcquire(ctx: BenchContext): Promise<Row[]> {
  const attempts = ctx.quick ? 300 : 1_000;
  const rounds = ctx.quick ? 2 : 3;
  const scenario = 'failed acquire on a held key';
  ctx.log(`  ${scenario}: ${rounds} rounds × ${attempts} attempts`);
  const url = ctx.db.url;
  const refused = (ok: boolean) => {
    if (ok) throw new Error('an attempt on a held key succeeded');
  };

  const lease: Contender = {
    name: LEASE_IMPLEMENTATIONS.shipped,
    workload: (round): Workload => {
      let holder: Awaited<ReturnType<typeof openLeases>> | undefined;
      let contender: Awaited<ReturnType<typeof openLeases>> | undefined;
      const attempt = async () => refused((await contender!.service.tryAcquire(`held:${round}`)) !== null);
      return {
        setup: async () => {
          holder = await openLeases(url, 1);
          contender = await openLeases(url, 1);
          if (!(await holder.service.tryAcquire(`held:${round}`))) throw new Error('holder could not acquire');
          return 1 + (await loops(1, WARM_UP, attempt)).ops;
        },
        run: () => loops(1, attempts, attempt),
        teardown: async () => {
          await contender?.close();
          await holder?.close();
        },
      };
    },
  };

  const upsert: Contender = {
    name: 'seed upsert (ON CONFLICT … WHERE expired)',
    workload: (round): Workload => {
      const pool = openPool(url, 1);
      const attempt = async () => refused((await seed.acquire(pool, `held:${round}`, randomUUID())).rowCount !== 0);
      return {
        setup: async () => {
          if ((await seed.acquire(pool, `held:${round}`, randomUUID())).rowCount !== 1)
            throw new Error('holder could not acquire');
          return 1 + (await loops(1, WARM_UP, attempt)).ops;
        },
        run: () => loops(1, attempts, attempt),
        teardown: () => pool.end(),
      };
    },
  };

  const advisoryLocks: Contender = {
    name: 'advisory lock (pg_try_advisory_lock)',
    workload: (round): Workload => {
      let open: Awaited<ReturnType<typeof openAdvisory>> | undefined;
      const attempt = async () => refused((await advisory.tryLock(open!.sessions[1], round)).rows[0].ok);
      return {
        setup: async () => {
          open = await openAdvisory(url, 2);
          await advisory.lock(open.sessions[0], round);
          return (await loops(1, WARM_UP, attempt)).ops;
        },
        run: () => loops(1, attempts, attempt),
        teardown: async () => open?.close(),
      };
    },
  };

  const verrou: Contender = {
    name: '@verrou/core (knex store)',
    workload: (round): Workload => {
      const open = openVerrou(url, 2);
      const attempt = async () => refused(await open.verrou.createLock(`held:${round}`, 60_000).acquireImmediately());
      return {
        setup: async () => {
          if (!(await open.verrou.createLock(`held:${round}`, 60_000).acquireImmediately()))
            throw new Error('holder could not acquire');
          return 1 + (await loops(1, WARM_UP, attempt)).ops;
        },
        run: () => loops(1, attempts, attempt),
        teardown: () => open.close(),
      };
    },
  };

  const contenders = [lease, upsert, advisoryLocks, verrou];
  const results = await interleaved(ctx.db, rounds, contenders, ctx.log);
  return contenders.map((contender) =>
    summarize(scenario, contender.name, 'refused attempt', results.get(contender.name)!),
  );
}
