/**
 * Issue 23, part 2, in one process: `LeaseService.elect()`'s handle, its events (events$ and diagnostics_channel),
 * the Prometheus leadership gauge, `await using`, hand-over by `stop()`, and input checks that write nothing.
 */
import diagnostics from 'node:diagnostics_channel';
import { LEASE_CHANNELS, LeaseArgumentError, type LeaseEvent, LeaseKeyError } from 'nest-pg-lease';
import { LeaseMetrics } from 'nest-pg-lease/prometheus';
import { Registry } from 'prom-client';
import { TcpProxy } from '../support/tcp-proxy.js';
import { openLeaseService, type OpenedService, useTestDatabase } from '../support/db.js';

/** Retries `check` (an expect) every 20 ms until it passes, or throws its last failure after `timeoutMs`. */
async function until(check: () => unknown, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      await check();
      return;
    } catch (error) {
      if (Date.now() > end) throw error;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

describe('LeaseService.elect()', () => {
  const db = useTestDatabase('elect');
  let a: OpenedService;
  let b: OpenedService;

  beforeAll(async () => {
    a = await openLeaseService(db.url, { owner: 'a', timing: { waitPollIntervalMs: 60_000 } });
    b = await openLeaseService(db.url, { owner: 'b', timing: { waitPollIntervalMs: 60_000 } });
  });

  afterAll(async () => {
    await a?.close();
    await b?.close();
  });

  test('elects one candidate, emits elected/revoked, sets the gauge, and hands over at once on stop()', async () => {
    const events: LeaseEvent[] = [];
    const published: unknown[] = [];
    const onPublished = (message: unknown) => published.push(message);
    diagnostics.subscribe(LEASE_CHANNELS.elected, onPublished);
    diagnostics.subscribe(LEASE_CHANNELS.revoked, onPublished);
    const subscription = a.service.events$.subscribe((event) => events.push(event));
    const registry = new Registry();
    const metrics = new LeaseMetrics(a.service, { registry });
    const revoked: string[] = [];
    try {
      const first = a.service.elect('elect:one', { onRevoked: (reason) => void revoked.push(reason) });
      await until(() => expect(first.isLeader).toBe(true));
      const second = b.service.elect('elect:one');
      await until(() => expect(b.service.waitingCount()).toBe(1));
      expect(second.isLeader).toBe(false);
      expect(await registry.getSingleMetricAsString('lease_leader')).toContain(
        'lease_leader{key_template="elect:one"} 1',
      );
      const term = first.lease!.fencingToken;
      const stoppedAt = performance.now();
      await first.stop();
      await until(() => expect(second.isLeader).toBe(true));
      // Woken by NOTIFY: the poll is 60 s.
      expect(performance.now() - stoppedAt).toBeLessThan(5_000);
      expect(second.lease!.fencingToken).toBeGreaterThan(term);
      expect(revoked).toEqual(['stopped']);
      expect(first.isLeader).toBe(false);
      expect(events.map((event) => event.type)).toEqual(expect.arrayContaining(['elected', 'revoked']));
      // Both services publish (one process): a's term, its end, b's term.
      expect(published.map((event) => (event as LeaseEvent).type)).toEqual(['elected', 'revoked', 'elected']);
      expect(await registry.getSingleMetricAsString('lease_leader')).toContain(
        'lease_leader{key_template="elect:one"} 0',
      );
      await second.stop();
    } finally {
      subscription.unsubscribe();
      metrics.close();
      diagnostics.unsubscribe(LEASE_CHANNELS.elected, onPublished);
      diagnostics.unsubscribe(LEASE_CHANNELS.revoked, onPublished);
    }
  });

  test('await using stops the candidate at the end of the block', async () => {
    {
      await using leadership = a.service.elect('elect:using');
      await until(() => expect(leadership.isLeader).toBe(true));
    }
    expect(a.service.heldLeases()).toHaveLength(0);
  });

  test('a lost lease revokes the term and the candidate stands again', async () => {
    const reasons: string[] = [];
    const elected: bigint[] = [];
    const c = await openLeaseService(db.url, { owner: 'c' });
    const leadership = c.service.elect('elect:lost', {
      onElected: (lease) => void elected.push(lease.fencingToken),
      onRevoked: (reason) => void reasons.push(reason),
    });
    try {
      await until(() => expect(leadership.isLeader).toBe(true));
      // Another holder takes the row: the next heartbeat finds another token.
      await db.admin.query(`UPDATE job_lease SET lease_token = gen_random_uuid() WHERE target_id = 'elect:lost'`);
      await until(() => expect(reasons).toEqual(['taken-over']));
      await db.admin.query(
        `UPDATE job_lease SET updated_at = now() - interval '1 hour' WHERE target_id = 'elect:lost'`,
      );
      await until(() => expect(elected).toHaveLength(2), 20_000);
      expect(elected[1]).toBeGreaterThan(elected[0]);
    } finally {
      await leadership.stop();
      await c.close();
    }
  });

  test('the database unreachable: the leader is revoked, the candidate retries without crashing and leads again', async () => {
    const { proxy, url } = await TcpProxy.inFrontOf(db.url);
    const c = await openLeaseService(url, { owner: 'c' });
    const reasons: string[] = [];
    let terms = 0;
    const leadership = c.service.elect('elect:outage', {
      onElected: () => void terms++,
      onRevoked: (reason) => void reasons.push(reason),
    });
    try {
      await until(() => expect(leadership.isLeader).toBe(true));
      proxy.set('drop');
      await until(() => expect(reasons).toEqual(['renewal-deadline']), 15_000);
      expect(leadership.isLeader).toBe(false);
      // Attempts fail meanwhile (logged, retried with a growing delay); none reaches the caller.
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      proxy.set('pass');
      await until(() => expect(terms).toBe(2), 40_000);
      expect(leadership.isLeader).toBe(true);
    } finally {
      await leadership.stop();
      await c.close();
      await proxy.stop();
    }
  }, 90_000);

  test("close() hands a standing leader's term over at once, not after shutdownGraceMs (issue 38, item 9)", async () => {
    const graceMs = 4_000;
    const c = await openLeaseService(db.url, {
      owner: 'c',
      timing: { shutdownGraceMs: graceMs, waitPollIntervalMs: 60_000 },
    });
    const reasons: string[] = [];
    const leading = c.service.elect('elect:close', { onRevoked: (reason) => void reasons.push(reason) });
    let second: ReturnType<typeof b.service.elect> | undefined;
    try {
      await until(() => expect(leading.isLeader).toBe(true));
      second = b.service.elect('elect:close');
      await until(() => expect(b.service.waitingCount()).toBe(1));
      const started = performance.now();
      const closing = c.close().then(() => performance.now() - started);
      // Woken by the release's NOTIFY (the poll is 60 s): at once, not after the grace.
      await until(() => expect(second!.isLeader).toBe(true), graceMs + 2_000);
      const handOverMs = performance.now() - started;
      const closedMs = await closing;
      expect(handOverMs).toBeLessThan(2_500);
      expect(closedMs).toBeLessThan(2_500);
      expect(reasons).toEqual(['stopped']);
    } finally {
      await second?.stop();
      await leading.stop();
      await c.close();
    }
  });

  test('bad input is refused with a typed error and writes nothing', async () => {
    expect(() => a.service.elect('', {})).toThrow(LeaseKeyError);
    expect(() => a.service.elect('elect:bad', { priority: 1.5 })).toThrow(LeaseArgumentError);
    const { rows } = await db.admin.query(`SELECT 1 FROM job_lease WHERE target_id = 'elect:bad'`);
    expect(rows).toHaveLength(0);
  });
});
