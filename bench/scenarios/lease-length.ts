/**
 * A lease length per call (issue 43, item 3; docs/configuration.md): uncontended acquire + release on distinct keys,
 * 1 and 16 clients, each call asking its own `leaseTimeoutMs` (alternately 20 minutes and 50 seconds: a batch then
 * carries lengths that differ row by row) next to the same calls with the module's length. The row is what the option
 * costs a call: nothing beyond noise is the goal (its length travels as one more parameter of the same statement).
 */
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
/** The lengths the calls ask, in turn (both above the module's floor at the bench's default timing). */
const LENGTHS_MS = [20 * 60_000, 50_000] as const;

const CONTENDERS = [
  { name: 'nest-pg-lease, a length per call (leaseTimeoutMs)', own: true },
  { name: "nest-pg-lease, the module's length", own: false },
] as const;

export async function leaseLengthCycles(ctx: BenchContext): Promise<Row[]> {
  const rows: Row[] = [];
  for (const clients of [1, 16]) {
    const perClient = clients === 1 ? (ctx.quick ? 300 : 1_000) : Math.round((ctx.quick ? 640 : 2_400) / clients);
    const rounds = ctx.quick ? 2 : 4;
    const scenario = `lease length per call: acquire + release, ${clients} client${clients > 1 ? 's' : ''}`;
    ctx.log(`  ${scenario}: ${rounds} rounds × ${clients * perClient} ops`);
    const contenders = CONTENDERS.map(({ name, own }) => contender(ctx.db.url, name, clients, perClient, own));
    const results = await interleaved(ctx.db, rounds, contenders, ctx.log);
    for (const { name } of CONTENDERS) rows.push(summarize(scenario, name, 'acquire + release', results.get(name)!));
  }
  return rows;
}

function contender(url: string, name: string, clients: number, perClient: number, own: boolean): Contender {
  return {
    name,
    workload: (round): Workload => {
      let open: Awaited<ReturnType<typeof openLeases>> | undefined;
      const op = (warm: boolean) => async (c: number, i: number) => {
        const key = `len:${clients}:${round}:${own ? 'o' : 'm'}:${warm ? 'w' : 'm'}:${c}:${i}`;
        const options = own ? { leaseTimeoutMs: LENGTHS_MS[(c + i) % LENGTHS_MS.length] } : {};
        const held = await open!.service.tryAcquire(key, options);
        if (!held) throw new Error('uncontended tryAcquire returned null');
        await held.release();
      };
      return {
        setup: async () => {
          open = await openLeases(url, clients);
          return (await loops(clients, WARM_UP, op(true))).ops;
        },
        run: () => loops(clients, perClient, op(false)),
        teardown: async () => open?.close(),
      };
    },
  };
}
