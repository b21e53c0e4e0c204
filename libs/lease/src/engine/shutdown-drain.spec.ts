import { jest } from '@jest/globals';
import type { Logger } from '@nestjs/common';
import { ShutdownDrain } from './shutdown-drain.js';

/** The drain alone: it ends when the last lease is forgotten, or at the grace, and never earlier. */
describe('ShutdownDrain', () => {
  const lines: string[] = [];
  const logger = {
    log: (line: string) => lines.push(line),
    warn: (line: string) => lines.push(line),
  } as unknown as Logger;
  beforeEach(() => {
    lines.length = 0;
    jest.useFakeTimers();
  });
  afterEach(() => jest.useRealTimers());

  const settled = async (work: Promise<void>) => {
    let done = false;
    void work.then(() => (done = true));
    await Promise.resolve();
    await Promise.resolve();
    return done;
  };

  it('ends at once when nothing is held, or when the grace is 0', async () => {
    const empty = new ShutdownDrain(new Map(), logger);
    expect(await settled(empty.wait(25_000))).toBe(true);
    expect(empty.ended).toBe(true);
    const zero = new ShutdownDrain(new Map([['t', 1]]), logger);
    expect(await settled(zero.wait(0))).toBe(true);
    expect(lines).toEqual([]);
  });

  it('waits until the last lease is forgotten, not for the grace', async () => {
    const held = new Map([
      ['a', 1],
      ['b', 2],
    ]);
    const drain = new ShutdownDrain(held, logger);
    const waiting = drain.wait(25_000);
    held.delete('a');
    drain.forgotten();
    expect(await settled(waiting)).toBe(false);
    expect(drain.ended).toBe(false);
    held.delete('b');
    drain.forgotten();
    expect(await settled(waiting)).toBe(true);
    expect(drain.ended).toBe(true);
    expect(jest.getTimerCount()).toBe(0);
    expect(lines).toEqual(['Shutdown: waiting up to 25000 ms for 2 lease(s) in use to be released']);
  });

  it('ends at the grace with what is still held, and says so', async () => {
    const drain = new ShutdownDrain(new Map([['a', 1]]), logger);
    const waiting = drain.wait(1_000);
    jest.advanceTimersByTime(999);
    expect(await settled(waiting)).toBe(false);
    jest.advanceTimersByTime(1);
    expect(await settled(waiting)).toBe(true);
    expect(lines[1]).toMatch(/1 lease\(s\) still in use after shutdownGraceMs \(1000 ms\): aborting and releasing/);
    drain.forgotten(); // late: nothing left to end
  });
});
