/**
 * Uncontended acquire + release on distinct keys, 1, 16 and 64 clients in one process: the fixed cost of a lease,
 * next to an advisory lock + unlock, the seed's upsert + delete and @verrou/core; and the library with group commit
 * off (`maxBatchSize: 1`, every call its own statement and commit), to show what batching buys.
 */
import { randomUUID } from 'node:crypto';
import {
  advisory,
  openAdvisory,
  openLeases,
  openPool,
  openVerrou,
  seed,
  type LeaseVariant,
} from '../support/contenders.js';
import {
  interleaved,
  loops,
  summarize,
  type BenchContext,
  type Contender,
  type Row,
  type Workload,
} from '../support/measure.js';

const WARM_UP = 5;

export const LEASE_IMPLEMENTATIONS: Record<LeaseVariant, string> = {
  shipped: 'nest-pg-lease',
  'async-release': 'nest-pg-lease, asyncReleaseCommits',
  unlogged: 'nest-pg-lease, UNLOGGED table (prototype)',
  'fillfactor-80': 'nest-pg-lease, fillfactor 80 (previous setting)',
  unbatched: 'nest-pg-lease, maxBatchSize 1 (no group commit)',
};

export async function acquireRelease(ctx: BenchContext): Promise<Row[]> {
  const rows: Row[] = [];
  for (const clients of [1, 16, 64]) {
    const perClient = clients === 1 ? (ctx.quick ? 300 : 1_000) : Math.round((ctx.quick ? 640 : 2_400) / clients);
    const rounds = ctx.quick ? 2 : 4;
    const scenario = `acquire + release, ${clients} client${clients > 1 ? 's' : ''}`;
    ctx.log(`  ${scenario}: ${rounds} rounds × ${clients * perClient} ops`);
    const contenders = contendersFor(ctx, clients, perClient);
    const results = await interleaved(ctx.db, rounds, contenders, ctx.log);
    for (const contender of contenders)
      rows.push(summarize(scenario, contender.name, 'acquire + release', results.get(contender.name)!));
  }
  return rows;
}

function contendersFor(ctx: BenchContext, clients: number, perClient: number): Contender[] {
  const url = ctx.db.url;
  const run = (op: (client: number, i: number, warm: boolean) => Promise<void>) => ({
    warm: async () => (await loops(clients, WARM_UP, (c, i) => op(c, i, true))).ops,
    measured: () => loops(clients, perClient, (c, i) => op(c, i, false)),
  });

  const lease = (variant: LeaseVariant): Contender => ({
    name: LEASE_IMPLEMENTATIONS[variant],
    workload: (round): Workload => {
      let open: Awaited<ReturnType<typeof openLeases>> | undefined;
      const cycle = run(async (c, i, warm) => {
        const held = await open!.service.tryAcquire(`ar:${clients}:${round}:${variant}:${warm ? 'w' : 'm'}:${c}:${i}`);
        if (!held) throw new Error('uncontended tryAcquire returned null');
        await held.release();
      });
      return {
        setup: async () => {
          open = await openLeases(url, clients, {}, variant);
          return cycle.warm();
        },
        run: cycle.measured,
        teardown: async () => open?.close(),
      };
    },
  });

  const advisoryLocks: Contender = {
    name: 'advisory lock (pg_try_advisory_lock + unlock)',
    workload: (round): Workload => {
      let open: Awaited<ReturnType<typeof openAdvisory>> | undefined;
      const cycle = run(async (c, i, warm) => {
        const key = ((round * 2 + (warm ? 1 : 0)) * 100 + c) * 100_000 + i;
        const { rows } = await advisory.tryLock(open!.sessions[c], key);
        if (!rows[0].ok) throw new Error('uncontended advisory lock refused');
        await advisory.unlock(open!.sessions[c], key);
      });
      return {
        setup: async () => {
          open = await openAdvisory(url, clients);
          return cycle.warm();
        },
        run: cycle.measured,
        teardown: async () => open?.close(),
      };
    },
  };

  const seedUpsert: Contender = {
    name: 'seed upsert + delete (raw SQL)',
    workload: (round): Workload => {
      const pool = openPool(url, clients);
      const cycle = run(async (c, i, warm) => {
        const key = `ar:${clients}:${round}:${warm ? 'w' : 'm'}:${c}:${i}`;
        const token = randomUUID();
        const { rowCount } = await seed.acquire(pool, key, token);
        if (rowCount !== 1) throw new Error('uncontended seed upsert failed');
        await seed.release(pool, key, token);
      });
      return { setup: cycle.warm, run: cycle.measured, teardown: () => pool.end() };
    },
  };

  const verrou: Contender = {
    name: '@verrou/core (knex store)',
    workload: (round): Workload => {
      const open = openVerrou(url, clients);
      const cycle = run(async (c, i, warm) => {
        const lock = open.verrou.createLock(`ar:${clients}:${round}:${warm ? 'w' : 'm'}:${c}:${i}`, 60_000);
        if (!(await lock.acquireImmediately())) throw new Error('uncontended verrou lock refused');
        await lock.release();
      });
      return { setup: cycle.warm, run: cycle.measured, teardown: () => open.close() };
    },
  };

  // 64 clients: the library, its floor (advisory locks), the seed's SQL and the library unbatched; the rest add nothing.
  if (clients === 64) return [lease('shipped'), advisoryLocks, seedUpsert, lease('unbatched')];
  return [
    lease('shipped'),
    advisoryLocks,
    lease('async-release'),
    lease('unlogged'),
    seedUpsert,
    verrou,
    lease('unbatched'),
  ];
}
