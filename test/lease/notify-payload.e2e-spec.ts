import pg from 'pg';
import { formatHeadPayload, parseHeadPayload } from '../../libs/lease/src/internal.js';
import { eventually, useTestDatabase } from '../support/db.js';

/**
 * The head-only NOTIFY payload as PostgreSQL writes it (a real release, a real semaphore release), read back by the
 * parser the notifier uses: whatever the key holds — spaces, slashes, unicode, U+001F, a look-alike of a payload.
 * The format itself is pinned without a database in libs/lease/src/database/head-payload.spec.ts.
 */
const KEYS = ['notify key with spaces', 'notify/tenant/7/export', 'notify:clé 🔑 ключ', 'notify\u001f0', '\u001f'];

describe('head-only NOTIFY payloads written by PostgreSQL', () => {
  const db = useTestDatabase('notify_payload');
  let listener: pg.Client;
  const heard: string[] = [];
  db.beforeDrop(() => listener?.end());

  beforeAll(async () => {
    listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    listener.on('notification', (message) => {
      if (message.channel === 'job_lease_next' && message.payload !== undefined) heard.push(message.payload);
    });
    await listener.query('LISTEN job_lease_next');
  });

  /** The payloads heard since `from` that name `targetKey`, parsed. */
  const namingKey = (from: number, targetKey: string) =>
    heard
      .slice(from)
      .map((payload) => ({ payload, parsed: parseHeadPayload(payload) }))
      .filter(({ parsed }) => parsed?.targetKey === targetKey);

  test.each(KEYS)('a handed grant `<waiter id>/<token> <key>` round-trips, key %j', async (targetKey) => {
    const a = await db.open({ owner: 'a' });
    const b = await db.open({ owner: 'b' });
    const holder = (await a.service.tryAcquire(targetKey))!;
    expect(holder).not.toBeNull();
    const waiting = b.service.acquire(targetKey, { priority: 1, onBusy: { wait: { timeoutMs: 15_000 } } });
    await eventually(
      () => a.service.list(targetKey),
      (rows) => rows.some((row) => row.state === 'waiting'),
      'the waiter queued',
    );
    const from = heard.length;
    await holder.release();
    const granted = await waiting;
    const [grant] = await eventually(
      () => namingKey(from, targetKey).filter(({ parsed }) => parsed?.grant !== undefined),
      (found) => found.length > 0,
      'the grant heard',
    );
    // The grant's lease token is its waiter's id; the token is the one the waiter holds.
    expect(grant.parsed).toEqual({ waiterId: granted.token, targetKey, grant: granted.fencingToken });
    expect(formatHeadPayload(grant.parsed!)).toBe(grant.payload);
    await granted.release();
  });

  test.each(KEYS)('a wake-up `<waiter id> <key>` (a slot freed) round-trips, key %j', async (targetKey) => {
    const a = await db.open({ owner: 'a' });
    const b = await db.open({ owner: 'b' });
    const slots = [
      (await a.service.tryAcquire(targetKey, { limit: 2 }))!,
      (await a.service.tryAcquire(targetKey, { limit: 2 }))!,
    ];
    expect(slots.map((slot) => slot.slot)).toEqual([0, 1]);
    const waiting = b.service.acquire(targetKey, { limit: 2, priority: 1, onBusy: { wait: { timeoutMs: 15_000 } } });
    const { rows } = await eventually(
      () =>
        db.admin.query<{ id: string }>('SELECT waiter_id::text AS id FROM job_lease_waiter WHERE target_id = $1', [
          targetKey,
        ]),
      (result) => result.rows.length === 1,
      'the waiter queued',
    );
    const from = heard.length;
    await slots[1].release();
    const [wake] = await eventually(
      () => namingKey(from, targetKey),
      (found) => found.length > 0,
      'the wake-up heard',
    );
    expect(wake.parsed).toEqual({ waiterId: rows[0].id, targetKey });
    expect(formatHeadPayload(wake.parsed!)).toBe(wake.payload);
    const granted = await waiting;
    expect(granted.slot).toBe(1);
    await Promise.all([granted.release(), slots[0].release()]);
  });
});
