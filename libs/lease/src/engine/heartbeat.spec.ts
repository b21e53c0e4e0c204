import { firstValueFrom, take, toArray } from 'rxjs';
import { batchedHeartbeat } from './heartbeat.js';

describe('batchedHeartbeat', () => {
  test('renews the whole batch with one call per tick and reports what was kept', async () => {
    const calls: string[][] = [];
    const ticks = await firstValueFrom(
      batchedHeartbeat(
        10,
        () => ['a', 'b', 'c'],
        async (batch) => {
          calls.push([...batch]);
          return new Set(['a', 'c']);
        },
      ).pipe(take(3), toArray()),
    );
    expect(calls).toEqual([
      ['a', 'b', 'c'],
      ['a', 'b', 'c'],
      ['a', 'b', 'c'],
    ]);
    expect(ticks.map((tick) => [...(tick.kept ?? [])])).toEqual([
      ['a', 'c'],
      ['a', 'c'],
      ['a', 'c'],
    ]);
    expect(ticks.every((tick) => tick.sentAt > 0 && tick.latencyMs >= 0)).toBe(true);
  });

  test('an outcome may also name members skipped or found expired: neither counts as kept', async () => {
    const [tick] = await firstValueFrom(
      batchedHeartbeat(
        10,
        () => ['a', 'b', 'c', 'd'],
        async () => ({
          kept: new Set(['a']),
          skipped: new Set(['b']),
          expired: new Set(['c']),
        }),
      ).pipe(take(1), toArray()),
    );
    expect([...tick.kept!]).toEqual(['a']);
    expect([...tick.skipped!]).toEqual(['b']);
    expect([...tick.expired!]).toEqual(['c']);
  });

  test('a failing renewal is reported and the next tick tries again', async () => {
    let n = 0;
    const ticks = await firstValueFrom(
      batchedHeartbeat(
        10,
        () => ['a'],
        async () => {
          n += 1;
          if (n === 1) throw new Error('connection reset');
          return new Set(['a']);
        },
      ).pipe(take(2), toArray()),
    );
    expect(String(ticks[0].error)).toContain('connection reset');
    expect(ticks[1].kept?.has('a')).toBe(true);
  });

  test('ticks never overlap: a slow renewal makes the next ticks skip, not pile up', async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    await firstValueFrom(
      batchedHeartbeat(
        5,
        () => ['a'],
        async () => {
          maxInFlight = Math.max(maxInFlight, ++inFlight);
          await new Promise((resolve) => setTimeout(resolve, 40));
          inFlight -= 1;
          return new Set(['a']);
        },
      ).pipe(take(3), toArray()),
    );
    expect(maxInFlight).toBe(1);
  });

  test('an empty batch sends nothing', async () => {
    let calls = 0;
    let members: string[] = [];
    const done = firstValueFrom(
      batchedHeartbeat(
        10,
        () => members,
        async () => {
          calls += 1;
          return new Set<string>();
        },
      ).pipe(take(1)),
    );
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(calls).toBe(0);
    members = ['a'];
    await done;
    expect(calls).toBe(1);
  });
});
