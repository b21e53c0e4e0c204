/**
 * Read-write leases (issue 43, item 1; docs/read-write.md): 8 clients on ONE key, each holding it for a short piece
 * of work (HOLD_MS) then releasing, waiting in line when it cannot hold. Readers (`mode: 'shared'`) hold together;
 * writers (`mode: 'exclusive'`) one at a time, as a plain single holder (no mode) does. The row is the throughput of
 * holds: what sharing buys readers over one exclusive holder at a time, and what a reader's grant costs (each writes
 * the key's writer row, so readers' grants of one key are serialized, then they hold together).
 */
import type { RunOptions } from 'nest-pg-lease';
import { sleep } from '../../test/support/sleep.js';
import { openLeases } from '../support/contenders.js';
import { interleaved, loops, summarize, type BenchContext, type Contender, type Row } from '../support/measure.js';

const CLIENTS = 8;
const HOLD_MS = 5;
const WARM_UP = 2;

const MODES: ReadonlyArray<{ name: string; mode?: 'shared' | 'exclusive' }> = [
  { name: 'nest-pg-lease, readers (mode shared)', mode: 'shared' },
  { name: 'nest-pg-lease, writers (mode exclusive)', mode: 'exclusive' },
  { name: 'nest-pg-lease, single holder (no mode)' },
];

export async function readWriteHolds(ctx: BenchContext): Promise<Row[]> {
  const perClient = ctx.quick ? 25 : 100;
  const rounds = ctx.quick ? 2 : 4;
  const scenario = `read-write: ${CLIENTS} clients on one key, ${HOLD_MS} ms holds`;
  ctx.log(`  ${scenario}: ${rounds} rounds × ${CLIENTS * perClient} holds`);
  const contenders = MODES.map(({ name, mode }): Contender => contender(ctx.db.url, name, perClient, mode));
  const results = await interleaved(ctx.db, rounds, contenders, ctx.log);
  return MODES.map(({ name }) => summarize(scenario, name, 'acquire + hold + release', results.get(name)!));
}

function contender(url: string, name: string, perClient: number, mode?: 'shared' | 'exclusive'): Contender {
  return {
    name,
    workload: (round) => {
      let open: Awaited<ReturnType<typeof openLeases>> | undefined;
      const key = `rw:${name.length}:${round}`;
      const onBusy = { wait: { timeoutMs: 60_000 } };
      const options: RunOptions = mode ? { mode, onBusy } : { onBusy };
      const op = () => open!.service.run(key, () => sleep(HOLD_MS), options);
      return {
        setup: async () => {
          open = await openLeases(url, CLIENTS);
          return (await loops(CLIENTS, WARM_UP, op)).ops;
        },
        run: () => loops(CLIENTS, perClient, op),
        teardown: async () => open?.close(),
      };
    },
  };
}
