import { eventually, useTestDatabase } from '../support/db.js';
import { recordNamedStatements } from '../support/named-statements.js';

/**
 * What a waiting call sends, counted on the wire side of `pg` by the connection's application name: its first attempt
 * queues it in the same statement when refused. The head of the line (nobody live ahead of it) looks once more right
 * after, in case the holder's release ran beside its queueing and missed its row (no NOTIFY would then name it). A
 * caller queued behind a live waiter does not: a release that missed its row handed the key to a waiter ahead of it,
 * and the NOTIFY that names it when its turn comes reaches it (or the poll does). The polls are 30 s apart here, so
 * every statement counted comes from the wait itself.
 */
describe('the statements of a wait', () => {
  const db = useTestDatabase('wait_statements');
  const SLOW_POLL = { timing: { waitPollIntervalMs: 30_000, defaultWaitTimeoutMs: 20_000 } };

  /** The acquisition statements sent by each application's connections, by statement kind, in order. */
  const recordAcquisitions = () => recordNamedStatements(/_(acquire|acquire_or_queue|confirm_grant)$/);

  const waiters = async (key: string) =>
    Number((await db.admin.query('SELECT count(*) FROM job_lease_waiter WHERE target_id = $1', [key])).rows[0].count);

  test('the head of the line looks once more after queueing; a caller behind a live waiter sends nothing more', async () => {
    const holder = await db.open(SLOW_POLL, 'holder');
    const head = await db.open(SLOW_POLL, 'head');
    const behind = await db.open(SLOW_POLL, 'behind');
    // Each waiting service has waited once already: its LISTEN connection is open before its first attempt is sent
    // (a process's first wait starts listening after that attempt, and looks once more whatever its place).
    for (const waiting of [head, behind]) {
      const warm = (await holder.service.tryAcquire('line:warm'))!;
      const wait = waiting.service.acquire('line:warm');
      await eventually(
        () => waiters('line:warm'),
        (count) => count === 1,
        'the warm-up queued',
      );
      await warm.release();
      await (await wait).release();
    }
    const recording = recordAcquisitions();
    try {
      const held = (await holder.service.tryAcquire('line:one'))!;
      const first = head.service.acquire('line:one');
      await eventually(
        () => waiters('line:one'),
        (count) => count === 1,
        'the head queued',
      );
      const second = behind.service.acquire('line:one');
      await eventually(
        () => waiters('line:one'),
        (count) => count === 2,
        'the second queued',
      );
      // Long enough for any look that would follow a queueing statement (the polls are 30 s away).
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect([recording.of('head'), recording.of('behind')]).toEqual([
        ['acquire_or_queue', 'acquire'],
        ['acquire_or_queue'],
      ]);

      // Their turns come by NOTIFY: each confirms the grant handed to it, in line order.
      await held.release();
      const headLease = await first;
      await headLease.release();
      const behindLease = await second;
      expect(behindLease.isHeld()).toBe(true);
      await behindLease.release();
      expect(recording.of('behind')).toEqual(['acquire_or_queue', 'confirm_grant']);
    } finally {
      recording.stop();
    }
  });
});
