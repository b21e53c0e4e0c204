import type { Lease } from 'nest-pg-lease';
import { eventually, ISOLATIONS, useTestDatabase } from '../support/db.js';
import { holderOf, procsOf, rowsOf, track, untilQueued, waiterRows } from './helpers.js';

/** The grant order, under the server's default isolation and under `default_transaction_isolation = serializable`. */
describe.each(ISOLATIONS)('grant order (default_transaction_isolation = %s)', (isolation) => {
  const db = useTestDatabase('prio_order', isolation);
  const proc = procsOf(db);

  /** A holder, then waiters in separate processes queued one after the other (each row visible before the next). */
  async function queueUp(key: string, priorities: number[]) {
    const holder = await proc('holder');
    const held = await holder.service.tryAcquire(key);
    expect(held).not.toBeNull();
    const waiters = [];
    for (const [index, priority] of priorities.entries()) {
      const p = await proc(`w${index}-p${priority}`);
      const call = track(p.service.acquire(key, { priority, onBusy: { wait: { timeoutMs: 30_000 } } }));
      await untilQueued(db.admin, key, p.owner, call);
      waiters.push({ proc: p, priority, call });
    }
    return { holder, held: held!, waiters };
  }

  test('successive releases grant 5 (first queued), 5 (second), 3, 1 to waiters queued 1, 5, 3, 5', async () => {
    const key = 'order:1-5-3-5';
    const { held, waiters } = await queueUp(key, [1, 5, 3, 5]);
    const grants: string[] = [];
    let current: Lease = held;
    for (let round = 0; round < waiters.length; round++) {
      await current.release();
      const granted = await eventually(
        () => waiters.filter((w) => w.call.settled()),
        (settled) => settled.length === round + 1,
        `grant #${round + 1}`,
      );
      const next = granted.find((w) => !grants.includes(w.proc.name))!;
      expect(next.call.error).toBeUndefined();
      expect(await holderOf(db.admin, key)).toBe(next.proc.owner);
      // A granted waiter's row is deleted with the grant.
      expect((await waiterRows(db.admin, key)).map((row) => row.owner)).not.toContain(next.proc.owner);
      grants.push(next.proc.name);
      current = next.call.value!;
    }
    console.log(`grant order (queued as ${waiters.map((w) => w.proc.name).join(', ')}): ${grants.join(' → ')}`);
    expect(grants).toEqual(['w1-p5', 'w3-p5', 'w2-p3', 'w0-p1']);
    await current.release();
    expect(await waiterRows(db.admin, key)).toEqual([]);
  });

  test('list() shows the holder, then live waiters in grant order with priorities, positions and ages', async () => {
    const key = 'order:list';
    const { holder, waiters } = await queueUp(key, [1, 5, 3, 5]);
    const [w1, w5a, w3, w5b] = waiters;
    const snapshot = await holder.service.list(key);
    expect(snapshot.map((s) => [s.state, s.owner, s.priority, s.position])).toEqual([
      ['held', holder.owner, 0, undefined],
      ['waiting', w5a.proc.owner, 5, 1],
      ['waiting', w5b.proc.owner, 5, 2],
      ['waiting', w3.proc.owner, 3, 3],
      ['waiting', w1.proc.owner, 1, 4],
    ]);
    expect(snapshot.every((s) => s.live && s.ageMs >= 0 && s.sinceHeartbeatMs >= 0)).toBe(true);
    expect(snapshot[0].fencingToken).toEqual(expect.any(BigInt));
    expect(snapshot[0].mine).toBe(true);
    expect(snapshot.slice(1).some((s) => s.mine)).toBe(false);
    // Ages follow the order of queueing (1, 5a, 3, 5b), not the order of grant.
    const age = (owner: string) => snapshot.find((s) => s.owner === owner)!.ageMs;
    expect(age(w1.proc.owner)).toBeGreaterThanOrEqual(age(w5a.proc.owner));
    expect(age(w5a.proc.owner)).toBeGreaterThanOrEqual(age(w3.proc.owner));
    expect(age(w3.proc.owner)).toBeGreaterThanOrEqual(age(w5b.proc.owner));
    console.log(
      snapshot
        .map(
          (s) =>
            `${s.state.padEnd(7)} ${s.owner.padEnd(16)} priority ${s.priority}` +
            ` position ${s.position ?? '-'} age ${s.ageMs} ms`,
        )
        .join('\n'),
    );
  });

  test('list() flags a dead waiter (stale heartbeat) and gives it no position', async () => {
    const key = 'order:dead-in-list';
    const holder = await proc('lister');
    expect(await holder.service.tryAcquire(key)).not.toBeNull();
    // Rows written directly, so no live process of this target renews or evicts them while we look.
    await db.admin.query(
      `INSERT INTO job_lease_waiter (target_id, waiter_id, owner, priority, timeout_ms, queued_at, seq, heartbeat_at)
       VALUES ($1, gen_random_uuid(), 'ghost', 9, 600, now() - interval '1 hour', nextval('job_lease_waiter_seq'),
               now() - interval '1 hour'),
              ($1, gen_random_uuid(), 'alive', 2, 3600000, now(), nextval('job_lease_waiter_seq'), now())`,
      [key],
    );
    const waiting = (await holder.service.list(key)).filter((s) => s.state === 'waiting');
    expect(waiting.map((s) => [s.owner, s.live, s.position])).toEqual([
      ['ghost', false, undefined],
      ['alive', true, 1],
    ]);
    expect(waiting[0].ageMs).toBeGreaterThanOrEqual(3_600_000 - 1_000);
  });

  test('strict priority (aging off): a low waiter starves while higher ones keep coming, then is served', async () => {
    const key = 'order:starvation';
    const holder = await proc('holder');
    let current: Lease = (await holder.service.tryAcquire(key))!;
    const low = await proc('low-p0');
    const lowCall = track(low.service.acquire(key, { priority: 0, onBusy: { wait: { timeoutMs: 60_000 } } }));
    await untilQueued(db.admin, key, low.owner, lowCall);
    const stream = await proc('stream-p1');
    for (let round = 0; round < 5; round++) {
      // Each newcomer queues after the low waiter, yet is served first.
      const high = track(stream.service.acquire(key, { priority: 1, onBusy: { wait: { timeoutMs: 60_000 } } }));
      await eventually(
        () => rowsOf(db.admin, key, stream.owner),
        (rows) => rows.length === 1,
        `high #${round} queued`,
      );
      await current.release();
      current = await high.promise;
      expect(lowCall.settled()).toBe(false);
    }
    await current.release();
    await (await lowCall.promise).release();
  });
});
