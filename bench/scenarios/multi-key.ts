/**
 * Several keys at once (issue 43, item 2): `run([a, b], work)` — the two keys taken in the global order, one statement
 * each, released together — next to two nested `run`s (`run(a, () => run(b, work))`), and one single-key `run` for
 * scale. 1 client, each cycle on keys of its own (the rows exist after the warm-up: a key in use). The work is empty:
 * what is measured is the acquisitions and releases.
 */
import { openLeases } from '../support/contenders.js';
import { interleaved, loops, summarize, type BenchContext, type Contender, type Row } from '../support/measure.js';

const WARM_UP = 5;

type Shape = 'multi' | 'nested' | 'single';

const SHAPES: ReadonlyArray<{ name: string; shape: Shape }> = [
  { name: 'nest-pg-lease, run([a, b]) (two keys at once)', shape: 'multi' },
  { name: 'nest-pg-lease, run(a, () => run(b)) (nested)', shape: 'nested' },
  { name: 'nest-pg-lease, run(a) (one key, for scale)', shape: 'single' },
];

export async function multiKeyCycles(ctx: BenchContext): Promise<Row[]> {
  const clients = 1;
  const perClient = ctx.quick ? 300 : 1_000;
  const rounds = ctx.quick ? 2 : 4;
  const scenario = 'two-key run, 1 client';
  ctx.log(`  ${scenario}: ${rounds} rounds × ${perClient} ops`);
  const contenders = SHAPES.map(({ name, shape }) => contender(ctx.db.url, name, shape, clients, perClient));
  const results = await interleaved(ctx.db, rounds, contenders, ctx.log);
  return SHAPES.map(({ name }) => summarize(scenario, name, 'run (acquire + release)', results.get(name)!));
}

function contender(url: string, name: string, shape: Shape, clients: number, perClient: number): Contender {
  return {
    name,
    workload: (round) => {
      let open: Awaited<ReturnType<typeof openLeases>> | undefined;
      const op = async (client: number) => {
        const service = open!.service;
        const [a, b] = [`mk:${shape}:${round}:${client}:a`, `mk:${shape}:${round}:${client}:b`];
        if (shape === 'multi') await service.run([a, b], () => undefined);
        else if (shape === 'nested') await service.run(a, () => service.run(b, () => undefined));
        else await service.run(a, () => undefined);
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
