/**
 * Issue 23, part 2: leader election with three processes (`leader-child.ts`: a Nest app with a `@LeaderElection`
 * provider writing through `lease.fenced()` while it leads). Crash (SIGKILL), graceful stop (SIGTERM), pause
 * (SIGSTOP) and priority; after each, the history of fenced writes shows one leader at a time with rising terms.
 */
import { startService, useTestDatabase } from '../support/db.js';
import { acquiredAtMs, watchExpiry } from '../support/row-expiry.js';
import { sleep } from '../support/sleep.js';
import { checkHistory, Cluster } from './cluster.js';

const HEARTBEAT_MS = 200;
const LEASE_TIMEOUT_MS = 2_000;
/** A loaded, shared 2-core machine: process start, GC, the other engineers' suites. */
const MARGIN_MS = 2_500;

describe('leader election across three processes', () => {
  const db = useTestDatabase('leader');
  const clusters: Cluster[] = [];
  const figures: string[] = [];

  beforeAll(async () => {
    const schema = await startService(db.url);
    await schema.close();
  });

  db.beforeDrop(() => {
    for (const cluster of clusters) cluster.kill();
    console.log(figures.join('\n'));
  });

  async function cluster(key: string, options: Record<string, unknown>): Promise<Cluster> {
    const made = await Cluster.create(db.admin, db.url, key, options);
    clusters.push(made);
    return made;
  }

  async function expectOneLeaderAtATime(made: Cluster): Promise<void> {
    const history = await made.history(db.admin);
    expect(history.length).toBeGreaterThan(0);
    expect(checkHistory(history)).toEqual([]);
    const terms = made.reports.filter((report) => report.type === 'elected').map((report) => BigInt(report.token!));
    for (let i = 1; i < terms.length; i++) expect(terms[i]).toBeGreaterThan(terms[i - 1]);
  }

  test('a crashed leader (SIGKILL) is replaced within leaseTimeoutMs + heartbeatIntervalMs', async () => {
    const made = await cluster('crash', {
      timing: { heartbeatIntervalMs: HEARTBEAT_MS, leaseTimeoutMs: LEASE_TIMEOUT_MS, waitPollIntervalMs: HEARTBEAT_MS },
    });
    await Promise.all(['a', 'b', 'c'].map((name) => made.start(name)));
    const first = await made.elected();
    await sleep(500);
    const killedAt = Date.now();
    const from = made.reports.length;
    // When the dead leader's row expires, by the server's clock, read until another process leads.
    const expiry = watchExpiry(db.admin, 'crash', first.token!);
    made.children.get(first.name)!.kill('SIGKILL');
    const second = await made.elected(from);
    const expiresAtMs = await expiry.stop();
    const handOverMs = second.at - killedAt;
    figures.push(
      `leader SIGKILL: ${first.name} → ${second.name} in ${handOverMs} ms (bound ${LEASE_TIMEOUT_MS} + ${HEARTBEAT_MS})`,
    );
    expect(second.name).not.toBe(first.name);
    // Not before the row expired (a late heartbeat tick makes it expire earlier than the kill suggests): the new
    // term's grant against the expiry read above, both on the server's clock.
    expect(Number.isFinite(expiresAtMs)).toBe(true);
    expect(await acquiredAtMs(db.admin, 'crash', second.token!)).toBeGreaterThanOrEqual(expiresAtMs);
    expect(handOverMs).toBeLessThan(LEASE_TIMEOUT_MS + HEARTBEAT_MS + MARGIN_MS);
    await sleep(300);
    await expectOneLeaderAtATime(made);
  }, 180_000);

  test('a graceful stop (SIGTERM) hands over at once, by NOTIFY (the poll is 60 s)', async () => {
    const made = await cluster('term', {
      timing: { heartbeatIntervalMs: HEARTBEAT_MS, leaseTimeoutMs: 20_000, waitPollIntervalMs: 60_000 },
    });
    await Promise.all(['a', 'b', 'c'].map((name) => made.start(name)));
    const first = await made.elected();
    await sleep(300);
    const from = made.reports.length;
    const stoppedAt = Date.now();
    made.children.get(first.name)!.kill('SIGTERM');
    const second = await made.elected(from, 15_000);
    const handOverMs = second.at - stoppedAt;
    figures.push(
      `leader SIGTERM: ${first.name} → ${second.name} in ${handOverMs} ms (lease timeout 20000, poll 60000)`,
    );
    expect(second.name).not.toBe(first.name);
    expect(handOverMs).toBeLessThan(5_000);
    // The stopped leader hears onRevoked once its release (the handover) has returned: its report may arrive after the
    // next leader's, on another pipe.
    const revoked = await made.next((report) => report.type === 'revoked' && report.name === first.name, from, 5_000);
    expect(revoked.reason).toBe('stopped');
    await sleep(300);
    await expectOneLeaderAtATime(made);
  }, 180_000);

  test('a paused leader (SIGSTOP) is revoked locally: its fenced write after SIGCONT is refused', async () => {
    const made = await cluster('pause', {
      timing: { heartbeatIntervalMs: HEARTBEAT_MS, leaseTimeoutMs: LEASE_TIMEOUT_MS, waitPollIntervalMs: HEARTBEAT_MS },
    });
    await Promise.all(['a', 'b', 'c'].map((name) => made.start(name)));
    const first = await made.elected();
    await sleep(300);
    const from = made.reports.length;
    const paused = made.children.get(first.name)!;
    paused.kill('SIGSTOP');
    const second = await made.elected(from);
    await sleep(500);
    paused.kill('SIGCONT');
    const revoked = await made.next((report) => report.type === 'revoked' && report.name === first.name, from);
    const refused = await made.next((report) => report.type === 'refused' && report.name === first.name, from);
    figures.push(
      `leader SIGSTOP: ${first.name} paused, ${second.name} elected; after SIGCONT ${first.name} revoked ` +
        `(${revoked.reason}), its write refused: ${(refused as { error?: string }).error}`,
    );
    expect(['renewal-deadline', 'taken-over']).toContain(revoked.reason);
    const history = await made.history(db.admin);
    const lastOld = history.map((row) => row.token).lastIndexOf(BigInt(first.token!));
    const firstNew = history.findIndex((row) => row.token === BigInt(second.token!));
    expect(firstNew).toBeGreaterThan(lastOld);
    await expectOneLeaderAtATime(made);
  }, 180_000);

  test('candidates wait in the priority line: the preferred instance leads next', async () => {
    const made = await cluster('priority', {
      timing: { heartbeatIntervalMs: HEARTBEAT_MS, leaseTimeoutMs: 20_000, waitPollIntervalMs: 60_000 },
    });
    await made.start('a', 0);
    await made.elected();
    // The low-priority candidate queues first: first come would pick it.
    await made.start('low', 0);
    await sleep(1_000);
    await made.start('high', 5);
    await sleep(500);
    const from = made.reports.length;
    made.children.get('a')!.kill('SIGTERM');
    const next = await made.elected(from, 15_000);
    figures.push(`priority: after a's stop, ${next.name} elected`);
    expect(next.name).toBe('high');
    await sleep(300);
    await expectOneLeaderAtATime(made);
  }, 180_000);
});
