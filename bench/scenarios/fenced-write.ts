/**
 * A write fenced by the lease (one transaction: lock the lease row, check the token, write) next to the same write
 * in a plain transaction and in autocommit. Each client holds its own lease and updates its own counter row.
 */
import type { Lease } from 'nest-pg-lease';
import { openLeases } from '../support/contenders.js';
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
const WRITE = 'UPDATE bench_counter SET n = n + 1 WHERE id = $1';

type Mode = 'fenced' | 'transaction' | 'autocommit';

const NAMES: Record<Mode, string> = {
  fenced: 'lease.fenced(write)',
  transaction: 'same write in a transaction, no fence',
  autocommit: 'same write, autocommit',
};

export async function fencedWrite(ctx: BenchContext): Promise<Row[]> {
  const rows: Row[] = [];
  for (const clients of [1, 16]) {
    const perClient = clients === 1 ? (ctx.quick ? 300 : 1_000) : ctx.quick ? 40 : 150;
    const rounds = ctx.quick ? 2 : 3;
    const scenario = `fenced write, ${clients} client${clients > 1 ? 's' : ''}`;
    ctx.log(`  ${scenario}: ${rounds} rounds × ${clients * perClient} writes`);
    const contenders = (['fenced', 'transaction', 'autocommit'] as const).map((mode) =>
      contender(ctx, mode, clients, perClient),
    );
    const results = await interleaved(ctx.db, rounds, contenders, ctx.log);
    for (const one of contenders) rows.push(summarize(scenario, one.name, 'write', results.get(one.name)!));
  }
  return rows;
}

function contender(ctx: BenchContext, mode: Mode, clients: number, perClient: number): Contender {
  return {
    name: NAMES[mode],
    workload: (round): Workload => {
      let open: Awaited<ReturnType<typeof openLeases>> | undefined;
      const held: Lease[] = [];
      const write = async (client: number) => {
        if (mode === 'fenced') await held[client].fenced((manager) => manager.query(WRITE, [client]));
        else if (mode === 'transaction')
          await open!.dataSource.transaction((manager) => manager.query(WRITE, [client]));
        else await open!.dataSource.query(WRITE, [client]);
      };
      return {
        setup: async () => {
          open = await openLeases(ctx.db.url, clients);
          if (mode === 'fenced') {
            for (let client = 0; client < clients; client++) {
              const lease = await open.service.tryAcquire(`fence:${clients}:${round}:${client}`);
              if (!lease) throw new Error('uncontended tryAcquire returned null');
              held.push(lease);
            }
          }
          return held.length + (await loops(clients, WARM_UP, write)).ops;
        },
        run: () => loops(clients, perClient, write),
        teardown: async () => open?.close(),
      };
    },
  };
}
