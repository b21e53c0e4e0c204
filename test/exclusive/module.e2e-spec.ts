import { Controller, Inject, Injectable, Module, type OnApplicationBootstrap, Post, SetMetadata } from '@nestjs/common';
import { NestFactory, Reflector } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Exclusive, LeaseConfigError, LeaseModule, LeaseService, leaseEntities, type Lease } from 'nest-pg-lease';
import { eventually, FAST, useTestDatabase } from '../support/db.js';
import { Gate, post, startApp } from './fixtures.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

const AUDIT = 'audit:action';

@Injectable()
class Jobs implements OnApplicationBootstrap {
  bootstrapLease?: string;
  gate = new Gate();
  constructor(@Inject(LeaseService) private readonly leases: LeaseService) {}

  @SetMetadata(AUDIT, 'rebuild')
  @Exclusive('job:{0}')
  async rebuild(id: string): Promise<string | undefined> {
    return this.leases.current()?.targetKey;
  }

  @Exclusive('hold:{0}')
  async hold(id: string): Promise<void> {
    this.gate.entered += 1;
    await this.gate.opened;
  }

  async onApplicationBootstrap(): Promise<void> {
    this.bootstrapLease = await this.rebuild('at-boot');
  }
}

class LeaseSettings {
  readonly heartbeatIntervalMs = 150;
  readonly leaseTimeoutMs = 1_500;
}

@Module({ providers: [LeaseSettings], exports: [LeaseSettings] })
class SettingsModule {}

@Controller()
class HoldController {
  constructor(@Inject(Jobs) private readonly jobs: Jobs) {}
  @Post('hold')
  @Exclusive('hold:http')
  async hold(): Promise<void> {
    this.jobs.gate.entered += 1;
    await this.jobs.gate.opened;
  }
}

describe('LeaseModule wiring', () => {
  const db = useTestDatabase('module');

  test('forRootAsync with useFactory reading a config provider; provider methods run under the lease, even from onApplicationBootstrap; other metadata survives the wrapping', async () => {
    const { app } = await startApp(
      [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        LeaseModule.forRootAsync({
          imports: [SettingsModule],
          inject: [LeaseSettings],
          useFactory: (settings: LeaseSettings) => ({
            timing: { heartbeatIntervalMs: settings.heartbeatIntervalMs, leaseTimeoutMs: settings.leaseTimeoutMs },
            tables: { createSchema: true },
          }),
        }),
      ],
      [],
      [Jobs],
    );
    try {
      const leases = app.get(LeaseService);
      expect(leases.options.timing.heartbeatIntervalMs).toBe(150);
      expect(leases.options.timing.leaseTimeoutMs).toBe(1_500);
      const jobs = app.get(Jobs);
      expect(jobs.bootstrapLease).toBe('job:at-boot');
      await expect(jobs.rebuild('7')).resolves.toBe('job:7');
      // The wrapper keeps the original's metadata and name.
      expect(app.get(Reflector).get(AUDIT, jobs.rebuild)).toBe('rebuild');
      expect(jobs.rebuild.name).toBe('rebuild');
    } finally {
      await app.close();
    }
  });

  test('reuses a named TypeORM DataSource (dataSourceName)', async () => {
    const { app } = await startApp(
      [
        TypeOrmModule.forRoot({ name: 'leases', type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        LeaseModule.forRoot(
          mergeLeaseOptions(FAST, { connections: { dataSourceName: 'leases' }, tables: { createSchema: true } }),
        ),
      ],
      [],
      [Jobs],
    );
    try {
      await expect(app.get(Jobs).rebuild('named')).resolves.toBe('job:named');
    } finally {
      await app.close();
    }
  });

  test('dataSource options: the module owns a DataSource and destroys it on shutdown', async () => {
    const { app } = await startApp(
      [
        LeaseModule.forRoot(
          mergeLeaseOptions(FAST, {
            tables: { createSchema: true },
            connections: { dataSource: { type: 'postgres', url: db.url, extra: { application_name: 'owned-ds' } } },
          }),
        ),
      ],
      [],
      [Jobs],
    );
    await expect(app.get(Jobs).rebuild('owned')).resolves.toBe('job:owned');
    await app.close();
    await eventually(
      () => db.admin.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE 'owned-ds%'`),
      (result) => result.rows[0].n === 0,
      'the owned DataSource to close its connections',
    );
  });

  test('no DataSource → LeaseConfigError at bootstrap, saying what to do', async () => {
    @Module({ imports: [LeaseModule.forRoot(FAST)] })
    class NoDataSource {}
    const app = await NestFactory.create(NoDataSource, { logger: false, abortOnError: false });
    await expect(app.init()).rejects.toThrow(LeaseConfigError);
    await expect(app.init()).rejects.toThrow(/TypeOrmModule\.forRoot|dataSource options/);
    await app.close().catch(() => undefined);
  });

  test('bad options → LeaseConfigError at bootstrap', async () => {
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url }),
        LeaseModule.forRoot({ timing: { heartbeatIntervalMs: 1_000, leaseTimeoutMs: 2_000 } }),
      ],
    })
    class BadOptions {}
    await expect(NestFactory.create(BadOptions, { logger: false, abortOnError: false })).rejects.toThrow(
      /at least 3 × heartbeatIntervalMs/,
    );
  });

  test('app shutdown aborts and releases held leases (controller and provider): another app acquires at once', async () => {
    const imports = [
      TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
      // No grace: this pins the immediate abort (the drain: test/lease/drain.e2e-spec.ts).
      LeaseModule.forRoot(mergeLeaseOptions(FAST, { tables: { createSchema: true }, timing: { shutdownGraceMs: 0 } })),
    ];
    const first = await startApp(imports, [HoldController], [Jobs]);
    const second = await startApp(imports, [], []);
    const jobs = (app: typeof first) => app.app.get(Jobs);
    try {
      const httpHold = post(`${first.url}/hold`);
      const providerHold = jobs(first)
        .hold('x')
        .catch((error: unknown) => error);
      await eventually(
        () => jobs(first).gate.entered,
        (n) => n === 2,
        'both holds to start',
      );
      const held = first.app.get(LeaseService).heldLeases();
      expect(held.map((lease: Lease) => lease.targetKey).sort()).toEqual(['hold:http', 'hold:x']);
      const signals = held.map((lease: Lease) => lease.signal);
      const other = second.app.get(LeaseService);
      expect(await other.tryAcquire('hold:x')).toBeNull();

      const closing = first.app.close();
      await eventually(
        () => signals.every((signal) => signal.aborted),
        (all) => all,
        'the held leases to be aborted',
      );
      const heldRows = () => db.admin.query('SELECT count(*)::int AS n FROM job_lease WHERE lease_token IS NOT NULL');
      await eventually(heldRows, (result) => result.rows[0].n === 0, 'rows released');
      const taken = await other.tryAcquire('hold:x');
      expect(taken).not.toBeNull();
      await taken!.release();
      jobs(first).gate.release();
      await closing;
      await httpHold.catch(() => undefined);
      await providerHold;
    } finally {
      // Whatever failed above, neither application may outlive the test (an open HTTP server keeps Jest alive).
      jobs(first).gate.release();
      await Promise.all([first.app.close().catch(() => undefined), second.app.close()]);
    }
  });
});
