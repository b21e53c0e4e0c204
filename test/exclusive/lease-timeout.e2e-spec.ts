/**
 * `@Exclusive(key, { leaseTimeoutMs })`: a decorated method's calls hold leases of the declaration's length, not the
 * module's; a length the module's timing cannot keep fails the bootstrap (`LeaseConfigError`), before any call.
 */
import { Injectable } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Exclusive, LeaseConfigError, LeaseModule, leaseEntities } from 'nest-pg-lease';
import { eventually, FAST, useTestDatabase } from '../support/db.js';
import { Gate, startApp } from './fixtures.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

let gate = new Gate();

@Injectable()
class Reports {
  @Exclusive('long-report:{0}', { leaseTimeoutMs: 2_500 })
  async build(id: string): Promise<string> {
    await gate.opened;
    return id;
  }
}

@Injectable()
class Hasty {
  // FAST: interval 100, margin 100, fenced idle timeout 1 000: the floor is (1 000 + 100 + 2 × 100) / 2 = 650.
  @Exclusive('hasty', { leaseTimeoutMs: 500 })
  async run(): Promise<void> {}
}

describe('@Exclusive with leaseTimeoutMs', () => {
  const db = useTestDatabase('exclusive_lease_timeout');
  const imports = () => [
    TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
    LeaseModule.forRoot(mergeLeaseOptions(FAST, { tables: { createSchema: true } })),
  ];

  test('its calls hold leases of its own length, renewed with it; one the timing cannot keep fails bootstrap', async () => {
    const { app } = await startApp(imports(), [], [Reports]);
    try {
      const running = app.get(Reports).build('7');
      const row = () =>
        db.admin
          .query(
            `SELECT lease_timeout_ms, updated_at > acquired_at AS renewed FROM job_lease
             WHERE target_id = 'long-report:7' AND lease_token IS NOT NULL`,
          )
          .then((result) => result.rows[0] as { lease_timeout_ms: number; renewed: boolean } | undefined);
      // Renewed at least once (the module's lease is 1 000 ms): the row keeps the declaration's 2 500.
      await eventually(row, (found) => found?.renewed === true, 'a renewal of the lease');
      expect(await row()).toEqual({ lease_timeout_ms: 2_500, renewed: true });
      gate.release();
      await expect(running).resolves.toBe('7');
    } finally {
      gate = new Gate();
      await app.close();
    }
    const refused = await startApp(imports(), [], [Hasty]).then(
      async (started) => {
        await started.app.close();
        return undefined;
      },
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(LeaseConfigError);
    expect((refused as Error).message).toBe(
      '@Exclusive on Hasty.run: leaseTimeoutMs (500) must be at least 650 under this module’s timing: ' +
        '(fencedIdleTimeoutMs 1000 + safetyMarginMs 100 + 2 × heartbeatIntervalMs 100) / 2, so a takeover blocked ' +
        'behind a paused fenced transaction still gets a usable lease. Ask a longer lease, or lower ' +
        'timing.fencedIdleTimeoutMs',
    );
  });
});
