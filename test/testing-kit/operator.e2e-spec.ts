/**
 * `LeaseOperator` over the testing kit's in-memory service: drains work (the same engine), and what the memory backend
 * does not model (force-release, which lives in the operator's tables) is a clear configuration error, not an outage.
 */
import { LeaseConfigError, LeaseDrainedError, LeaseOperator, type LeaseService } from 'nest-pg-lease';
import { createTestingLeaseService } from 'nest-pg-lease/testing';

describe('LeaseOperator over the in-memory service', () => {
  let service: LeaseService;
  let operator: LeaseOperator;

  beforeEach(() => {
    service = createTestingLeaseService();
    operator = new LeaseOperator(service);
  });

  afterEach(() => service.close());

  it('drains and undrains a key', async () => {
    await operator.drain('report:1', { by: 'ops', reason: 'maintenance' });
    await expect(service.run('report:1', () => 'ran')).rejects.toBeInstanceOf(LeaseDrainedError);
    await operator.undrain('report:1', { by: 'ops', reason: 'done' });
    await expect(service.run('report:1', () => 'ran')).resolves.toBe('ran');
  });

  it('force-release is a LeaseConfigError naming the testing kit, and the holder keeps its lease', async () => {
    const lease = await service.acquire('report:2', { onBusy: 'wait' });
    const error = await operator.forceRelease('report:2', { by: 'ops', reason: 'stuck' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseConfigError);
    expect((error as Error).message).toMatch(/nest-pg-lease\/testing/);
    expect(lease.isHeld()).toBe(true);
    await lease.release();
  });
});
