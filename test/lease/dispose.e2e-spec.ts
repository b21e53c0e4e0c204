/**
 * Issue 23, part 4: a `Lease` is `AsyncDisposable` — `await using lease = await leases.acquire(key)` releases it when
 * the block ends, also when the block throws. Disposing is `release()`: idempotent, and quiet for a lease already
 * released or lost.
 */
import { LeaseLostError } from 'nest-pg-lease';
import { FAST, type OpenedService, useTestDatabase } from '../support/db.js';

describe('await using a lease', () => {
  const db = useTestDatabase('dispose');
  let a: OpenedService;
  let b: OpenedService;

  beforeAll(async () => {
    a = await db.open({ owner: 'a' });
    b = await db.open({ owner: 'b' });
  });

  const live = async (key: string) =>
    (
      await db.admin.query(
        `SELECT owner FROM job_lease WHERE target_id = $1 AND lease_token IS NOT NULL AND updated_at + interval '1 ms' * $2 > clock_timestamp()`,
        [key, FAST.timing?.leaseTimeoutMs],
      )
    ).rows.map((row: { owner: string }) => row.owner);

  test('the row is released when the block ends', async () => {
    const key = 'dispose:block';
    {
      await using lease = await a.service.acquire(key);
      expect(lease.isHeld()).toBe(true);
      expect(await live(key)).toEqual(['a']);
    }
    expect(await live(key)).toEqual([]);
    expect(a.service.heldLeases()).toEqual([]);
  });

  test('the row is released when the block throws, and the error is the block’s', async () => {
    const key = 'dispose:throws';
    const failing = async () => {
      await using _lease = await a.service.acquire(key);
      expect(await live(key)).toEqual(['a']);
      throw new Error('the work failed');
    };
    await expect(failing()).rejects.toThrow('the work failed');
    expect(await live(key)).toEqual([]);
  });

  test('disposing a lease released in the block, or lost, never throws; a borrowed one is left to its owner', async () => {
    {
      await using lease = await a.service.acquire('dispose:released');
      await lease.release();
    }
    const lost = async () => {
      await using lease = (await a.service.tryAcquire('dispose:lost'))!;
      // Another process takes the row over (as after an expiry): the next renewal finds it gone.
      await db.admin.query(`UPDATE job_lease SET updated_at = '-infinity' WHERE target_id = $1`, ['dispose:lost']);
      const taken = await b.service.tryAcquire('dispose:lost');
      expect(taken).not.toBeNull();
      await new Promise<void>((resolve) => lease.signal.addEventListener('abort', () => resolve(), { once: true }));
      expect(lease.signal.reason).toBeInstanceOf(LeaseLostError);
      return taken!;
    };
    const taken = await lost();
    expect(await live('dispose:lost')).toEqual(['b']); // disposing the lost lease did not touch b's row
    await taken.release();
    await a.service.run('dispose:outer', async (outer) => {
      {
        await using inner = await a.service.acquire('dispose:outer');
        expect(inner.fencingToken).toBe(outer.fencingToken);
      }
      expect(outer.isHeld()).toBe(true);
      expect(await live('dispose:outer')).toEqual(['a']);
    });
  });
});
