/**
 * Issue 23: the demo's leader role. Two instances stand for `demo:leader`; one holds its lease row (what the
 * dashboard's lease table shows); SIGTERM it and the other instance leads at once, with a larger term.
 */
import type pg from 'pg';
import { type DemoStack, startStack } from '../../apps/demo/scripts/stack.js';
import { adminClient, createTestDatabase } from '../support/db.js';
import { ensureDemoBuilt } from './support.js';

interface Holder {
  owner: string;
  fencing_token: string;
}

describe('the demo leader role', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
  let stack: DemoStack | undefined;
  let client: pg.Client | undefined;

  beforeAll(async () => {
    await ensureDemoBuilt();
    db = await createTestDatabase('demo_leader');
    stack = await startStack({ databaseUrl: db.url, leader: true, leaseTimeoutMs: 20_000 });
    client = await adminClient(db.url);
  }, 180_000);

  afterAll(async () => {
    await client?.end();
    await stack?.stop();
    await db?.drop();
  });

  async function holder(other?: string): Promise<Holder> {
    for (let i = 0; i < 300; i++) {
      const { rows } = await client!.query<Holder>(
        `SELECT owner, fencing_token::text FROM job_lease WHERE target_id = 'demo:leader' AND lease_token IS NOT NULL`,
      );
      if (rows[0] && rows[0].owner !== other) return rows[0];
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    throw new Error('no leader of demo:leader');
  }

  test('one instance leads; a graceful stop hands over at once', async () => {
    const first = await holder();
    const name = (['A', 'B'] as const).find((instance) => first.owner.startsWith(`${instance}/`))!;
    expect(name).toBeDefined();
    const stoppedAt = Date.now();
    stack!.signal(name, 'SIGTERM');
    const next = await holder(first.owner);
    const handOverMs = Date.now() - stoppedAt;
    console.log(`demo:leader ${first.owner} → ${next.owner} in ${handOverMs} ms (lease timeout 20000)`);
    expect(BigInt(next.fencing_token)).toBeGreaterThan(BigInt(first.fencing_token));
    expect(handOverMs).toBeLessThan(10_000);
  }, 60_000);
});
