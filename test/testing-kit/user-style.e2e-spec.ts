/**
 * The testing kit used as an application would (issue 26 part 4, issue 28 item 4): imports from 'nest-pg-lease' and
 * 'nest-pg-lease/testing' only. A small service with `@Exclusive` methods, unit-tested in memory with
 * `LeaseTestingModule.forRoot()`, then integration-tested on a database of its own (`useLeaseDatabase`) on a real
 * PostgreSQL the tests provide, with its lost-lease path driven by the kit's faults (`takeOver`, `expire`,
 * `stallDatabase`).
 */
import { Inject, Injectable } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { Exclusive, LeaseBusyError, LeaseConfigError, LeaseLostError, LeaseService } from 'nest-pg-lease';
import {
  expire,
  LeaseTestingController,
  LeaseTestingModule,
  stallDatabase,
  takeOver,
  useLeaseDatabase,
} from 'nest-pg-lease/testing';
import { DataSource, type EntityManager } from 'typeorm';

/** The application's service: one report per user at a time, saved through the lease's fenced transaction. */
@Injectable()
class ReportService {
  /** Lets the test hold a report in progress (the slow part of the real work). */
  gate: Promise<void> = Promise.resolve();
  started?: () => void;
  ticks = 0;

  constructor(@Inject(LeaseService) private readonly leases: LeaseService) {}

  @Exclusive('report:{0}')
  async build(userId: string): Promise<string> {
    const lease = this.leases.current()!;
    this.started?.();
    await this.gate;
    await lease.fenced((manager: EntityManager) =>
      manager.query('INSERT INTO report (user_id, fencing_token) VALUES ($1, $2)', [
        userId,
        String(lease.fencingToken),
      ]),
    );
    return `report of ${userId}`;
  }

  @Exclusive('nightly', { onBusy: 'skip' })
  async nightly(): Promise<void> {
    this.ticks += 1;
  }
}

/** A report held in progress until `finish()`; `started` resolves once its lease is held. */
function holdReport(reports: ReportService) {
  let finish!: () => void;
  reports.gate = new Promise<void>((resolve) => (finish = resolve));
  const started = new Promise<void>((resolve) => (reports.started = resolve));
  return { started, finish };
}

const aborted = (signal: AbortSignal) =>
  new Promise<unknown>((resolve) => {
    if (signal.aborted) resolve(signal.reason);
    else signal.addEventListener('abort', () => resolve(signal.reason), { once: true });
  });

describe('unit tests of a decorated service, without PostgreSQL', () => {
  it('without the testing module a mocked LeaseService is not enough (the issue: no test double)', async () => {
    const module = await Test.createTestingModule({
      providers: [ReportService, { provide: LeaseService, useValue: {} }],
    }).compile();
    await expect(module.get(ReportService).nightly()).rejects.toThrow(LeaseConfigError);
    await module.close();
  });

  describe('with LeaseTestingModule.forRoot()', () => {
    let module: TestingModule;
    let reports: ReportService;
    let leases: LeaseService;
    let controls: LeaseTestingController;
    const saved: unknown[][] = [];

    beforeEach(async () => {
      saved.length = 0;
      const manager = { query: async (_sql: string, values: unknown[]) => void saved.push(values) };
      module = await Test.createTestingModule({
        imports: [LeaseTestingModule.forRoot({ fencedTransaction: (work) => work(manager as never) })],
        providers: [ReportService],
      }).compile();
      await module.init();
      reports = module.get(ReportService);
      leases = module.get(LeaseService);
      controls = module.get(LeaseTestingController);
    });

    afterEach(() => module.close());

    it('runs the method under a lease and saves through the fenced transaction the test supplies', async () => {
      await expect(reports.build('42')).resolves.toBe('report of 42');
      expect(saved).toEqual([['42', '1']]);
      expect(leases.heldLeases()).toHaveLength(0);
    });

    it('answers busy when another process holds the key, and skips a busy tick', async () => {
      controls.hold('report:42');
      controls.hold('nightly');
      await expect(reports.build('42')).rejects.toBeInstanceOf(LeaseBusyError);
      await expect(reports.nightly()).resolves.toBeUndefined();
      expect(reports.ticks).toBe(0);
      controls.free('nightly');
      await reports.nightly();
      expect(reports.ticks).toBe(1);
    });

    it('refuses the fenced save of a lease taken over while the report was built', async () => {
      const report = holdReport(reports);
      const building = reports.build('42');
      await report.started;
      const [lease] = leases.heldLeases();
      controls.takeOver('report:42');
      expect(await aborted(lease.signal)).toMatchObject({ reason: 'taken-over' });
      report.finish();
      await expect(building).rejects.toBeInstanceOf(LeaseLostError);
      expect(saved).toEqual([]);
    });

    it('refuses the fenced save of a lease that expired', async () => {
      const report = holdReport(reports);
      const building = reports.build('7');
      await report.started;
      const [lease] = leases.heldLeases();
      controls.expire('report:7');
      expect(await aborted(lease.signal)).toMatchObject({ reason: 'renewal-deadline' });
      report.finish();
      await expect(building).rejects.toMatchObject({ reason: 'renewal-deadline' });
      expect(saved).toEqual([]);
      // The key is free again: the next report takes it over, with a higher fencing token.
      await reports.build('7');
      expect(saved).toEqual([['7', '2']]);
    });
  });
});

describe('integration tests of a decorated service, on a real PostgreSQL', () => {
  // An application's CI sets DATABASE_URL (the default); this repository's Jest global setup names its server so.
  const database = useLeaseDatabase({ prefix: 'user_style', serverUrl: process.env.LEASE_TEST_SERVER_URL });
  let module: TestingModule;
  let reports: ReportService;
  let leases: LeaseService;
  /** The test's own connection: "another process" for the faults, and a reader of the saved rows. */
  let other: DataSource;

  beforeAll(async () => {
    other = await new DataSource({ type: 'postgres', url: database.url }).initialize();
    await other.query('CREATE TABLE report (user_id text NOT NULL, fencing_token bigint NOT NULL)');
    module = await Test.createTestingModule({
      imports: [LeaseTestingModule.forPostgres(database.url)],
      providers: [ReportService],
    }).compile();
    await module.init();
    reports = module.get(ReportService);
    leases = module.get(LeaseService);
  });

  afterAll(async () => {
    await module?.close();
    await other?.destroy();
  });

  const savedRows = async (userId: string) =>
    (await other.query<unknown[]>('SELECT user_id FROM report WHERE user_id = $1', [userId])).length;

  it('saves a report under the lease', async () => {
    await expect(reports.build('1')).resolves.toBe('report of 1');
    expect(await savedRows('1')).toBe(1);
  });

  for (const [fault, reason] of [
    ['takeOver', 'taken-over'],
    ['expire', 'renewal-deadline'],
    ['stallDatabase', 'renewal-deadline'],
  ] as const) {
    it(`loses the lease to ${fault} (${reason}): the signal aborts, the fenced save is refused`, async () => {
      const userId = `${fault}-user`;
      const report = holdReport(reports);
      const building = reports.build(userId);
      await report.started;
      const [lease] = leases.heldLeases();
      const stall =
        fault === 'takeOver'
          ? (await takeOver(other, `report:${userId}`), undefined)
          : fault === 'expire'
            ? (await expire(other, `report:${userId}`), undefined)
            : await stallDatabase(other, `report:${userId}`);
      try {
        const why = await aborted(lease.signal);
        expect(why).toBeInstanceOf(LeaseLostError);
        expect(why).toMatchObject({ reason });
      } finally {
        await stall?.release();
      }
      report.finish();
      await expect(building).rejects.toBeInstanceOf(LeaseLostError);
      expect(await savedRows(userId)).toBe(0);
    });
  }
});
