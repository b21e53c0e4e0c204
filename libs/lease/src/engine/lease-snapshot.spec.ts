import { snapshotsOf } from './lease-snapshot.js';

describe('snapshotsOf', () => {
  const row = {
    state: 'held' as const,
    target_id: 'report:1',
    slot: 0,
    owner: 'me',
    priority: 0,
    effective_priority: '0',
    fencing_token: '1099511627777',
    seq: null,
    age_ms: 10.4,
    since_heartbeat_ms: 3.2,
    timeout_ms: 1_000,
  };

  it('is JSON-safe as list() returns it (a controller can answer it): the fencing token as a string', () => {
    const [snapshot] = snapshotsOf([row], 'me');
    expect(snapshot.fencingToken).toBe(1099511627777n);
    expect(JSON.parse(JSON.stringify([snapshot]))).toEqual([
      {
        targetKey: 'report:1',
        state: 'held',
        owner: 'me',
        mine: true,
        priority: 0,
        effectivePriority: 0,
        ageMs: 10,
        sinceHeartbeatMs: 3,
        timeoutMs: 1_000,
        live: true,
        fencingToken: '1099511627777',
      },
    ]);
  });

  it('a row of a semaphore is its key with its slot (row slot 1 … limit: slot 0 … limit − 1); waiters have none', () => {
    const waiting = { ...row, state: 'waiting' as const, slot: null, fencing_token: null, seq: '7' };
    const [own, first, third, waiter] = snapshotsOf(
      [row, { ...row, slot: 1 }, { ...row, slot: 3, target_id: 'a\u001f2' }, waiting],
      'me',
    );
    expect([own.targetKey, own.slot]).toEqual(['report:1', undefined]);
    expect([first.targetKey, first.slot]).toEqual(['report:1', 0]);
    expect([third.targetKey, third.slot]).toEqual(['a\u001f2', 2]);
    expect([waiter.slot, waiter.position]).toEqual([undefined, 1]);
  });
});
