/**
 * Issue 38, item 8: `app.close()` is bounded whatever a leader's callbacks do. A `@LeaderElection` provider whose
 * `onElected` (and `onRevoked`) ignore the lease's signal and run for 15 s: at shutdown the term is handed over at
 * once, the callback is told (the term lease's signal aborts), and close() waits for it no longer than
 * `shutdownGraceMs`.
 */
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  type Lease,
  LeaderElection,
  LeaseModule,
  type OnLeadership,
  leaseEntities,
  type LeadershipEndReason,
} from 'nest-pg-lease';
import { eventually, FAST, useTestDatabase } from '../support/db.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

const KEY = 'leader:stuck';
const GRACE_MS = 1_000;
/** What the callbacks take, ignoring every signal: far beyond the grace. */
const CALLBACK_MS = 15_000;

/** Resolves after `ms` or when `release()` is called (the test's cleanup), whichever comes first. */
class Hold {
  private timers = new Set<() => void>();
  wait(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => (clearTimeout(timer), this.timers.delete(done), resolve());
      const timer = setTimeout(done, ms);
      this.timers.add(done);
    });
  }
  release(): void {
    for (const done of [...this.timers]) done();
  }
}

@LeaderElection(KEY)
@Injectable()
class StuckLeader implements OnLeadership {
  static readonly hold = new Hold();
  lease?: Lease;
  abortedAt?: number;
  revoked: LeadershipEndReason[] = [];

  async onElected(lease: Lease): Promise<void> {
    this.lease = lease;
    lease.signal.addEventListener('abort', () => (this.abortedAt = performance.now()), { once: true });
    await StuckLeader.hold.wait(CALLBACK_MS);
  }

  async onRevoked(reason: LeadershipEndReason): Promise<void> {
    this.revoked.push(reason);
    await StuckLeader.hold.wait(CALLBACK_MS);
  }
}

describe('a leader at shutdown', () => {
  const db = useTestDatabase('leader_shutdown');

  afterAll(() => StuckLeader.hold.release());

  async function boot(owner: string) {
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        LeaseModule.forRoot(
          mergeLeaseOptions(FAST, {
            tables: { createSchema: true },
            owner,
            timing: { shutdownGraceMs: GRACE_MS, waitPollIntervalMs: 60_000 },
          }),
        ),
      ],
      providers: [StuckLeader],
    })
    class AppModule {}
    const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
    return { app, leader: app.get(StuckLeader) };
  }

  test('app.close() is bounded by shutdownGraceMs while onElected / onRevoked run on; the term is handed over at once', async () => {
    const a = await boot('a');
    const leader = await eventually(() => a.leader.lease, Boolean, 'a elected');
    const b = await boot('b');
    try {
      const started = performance.now();
      let closedMs: number | undefined;
      const closing = a.app.close().then(() => (closedMs = performance.now() - started));
      // Handed over at once: b's candidate is woken by the release's NOTIFY (its poll is 60 s).
      await eventually(() => b.leader.lease, Boolean, 'b elected', 10_000);
      const handOverMs = performance.now() - started;
      await eventually(
        () => closedMs,
        (ms) => ms !== undefined,
        'a closed',
        10_000,
      );
      expect(closedMs).toBeLessThan(GRACE_MS + 4_000);
      expect(handOverMs).toBeLessThan(1_500);
      // The callback was told: its lease's signal aborted when shutdown began.
      expect(leader!.signal.aborted).toBe(true);
      expect(a.leader.abortedAt! - started).toBeLessThan(1_000);
      expect(a.leader.revoked).toEqual(['stopped']);
      await closing;
    } finally {
      StuckLeader.hold.release();
      await a.app.close();
      await b.app.close();
    }
  }, 60_000);
});
