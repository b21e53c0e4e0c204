import { LeaseArgumentError, LeaseJoinedRunError, LeaseWaitTimeoutError, type LeaseEvent } from 'nest-pg-lease';
import { type OpenedService, useTestDatabase } from '../support/db.js';

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
    await expect(a.service.run(key, () => 'never', { onBusy: 'join', joinTimeoutMs: 100 })).rejects.toBeInstanceOf(
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

  test('bad join options are refused before anything is written', async () => {
    await expect(a.service.run('join:bad', () => 1, { onBusy: 'wait' as never })).rejects.toBeInstanceOf(
      LeaseArgumentError,
    );
    await expect(a.service.run('join:bad', () => 1, { onBusy: 'join', joinTimeoutMs: -1 })).rejects.toBeInstanceOf(
      LeaseArgumentError,
    );
    const rows = await db.admin.query(`SELECT 1 FROM job_lease WHERE target_id = 'join:bad'`);
    expect(rows.rowCount).toBe(0);
  });
});
