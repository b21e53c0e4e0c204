/**
 * Semaphores (issue 30): acquire + release of one slot with `limit` 1 (the single holder's path: the same statement),
 * 4 and 16, side by side with a call without `limit`. Each client cycles on a key of its own, so the rows exist after
 * the warm-up (the steady state of a key in use): what a slot costs over a key's own row is the slot statement's
 * extra probes (the limit row and the limit's slot rows) and its own release. 1 and 16 clients.
 */
import { openLeases } from '../support/contenders.js';
import { interleaved, loops, summarize, type BenchContext, type Contender, type Row } from '../support/measure.js';

const WARM_UP = 5;

const LIMITS: ReadonlyArray<{ name: string; limit?: number }> = [
  { name: 'nest-pg-lease, single holder (no limit)' },
  { name: 'nest-pg-lease, limit 1' },
  { name: 'nest-pg-lease, limit 4 (semaphore)', limit: 4 },
  { name: 'nest-pg-lease, limit 16 (semaphore)', limit: 16 },
];

export async function semaphoreCycles(ctx: BenchContext): Promise<Row[]> {
  const rows: Row[] = [];
  for (const clients of [1, 16]) {
    const perClient = clients === 1 ? (ctx.quick ? 300 : 1_000) : Math.round((ctx.quick ? 640 : 2_400) / clients);
    const rounds = ctx.quick ? 2 : 4;
    const scenario = `semaphore acquire + release, ${clients} client${clients > 1 ? 's' : ''}`;
    ctx.log(`  ${scenario}: ${rounds} rounds × ${clients * perClient} ops`);
    const contenders = LIMITS.map(({ name, limit }): Contender =>
      contender(ctx.db.url, name, clients, perClient, limit),
    );
    const results = await interleaved(ctx.db, rounds, contenders, ctx.log);
    for (const { name } of LIMITS) rows.push(summarize(scenario, name, 'acquire + release', results.get(name)!));
  }
  return rows;
}

function contender(url: string, name: string, clients: number, perClient: number, limit?: number): Contender {
  return {
    name,
    workload: (round) => {
      let open: Awaited<ReturnType<typeof openLeases>> | undefined;
      const options = name.endsWith('limit 1') ? { limit: 1 } : limit === undefined ? {} : { limit };
      const op = async (client: number) => {
        const held = await open!.service.tryAcquire(`sem:${name.length}:${round}:${client}`, options);
        if (!held) throw new Error(`${name}: an uncontended tryAcquire returned null`);
        await held.release();
      };
      return {
        setup: async () => {
          open = await openLeases(url, clients);
          return (await loops(clients, WARM_UP, op)).ops;
        },
        run: () => loops(clients, perClient, op),
        teardown: async () => open?.close(),
      };
    },
  };
}
