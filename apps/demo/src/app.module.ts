import { hostname } from 'node:os';
import { type DynamicModule, Module } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import { TerminusModule } from '@nestjs/terminus';
import { TypeOrmModule } from '@nestjs/typeorm';
import { LeaseConsoleModule, LeaseExceptionFilter, leaseEntities, leaseMigrations, LeaseModule } from 'nest-pg-lease';
import { LeaseMetricsModule } from 'nest-pg-lease/prometheus';
import { LeaseHealthIndicator } from 'nest-pg-lease/terminus';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { ActivityLog } from './activity.log.js';
import { ConsoleTokenGuard } from './dashboard/console.guard.js';
import { DashboardController } from './dashboard/dashboard.controller.js';
import { DEMO_CONFIG, type DemoConfig } from './demo.config.js';
import { DigestService } from './digest.service.js';
import { JobDigest } from './job-digest.entity.js';
import { CreateJobDigest1764547200000 } from './job-digest.migration.js';
import { JobResult } from './job-result.entity.js';
import { CreateJobResult1764460800000 } from './job-result.migration.js';
import { LeaderRole } from './leader.role.js';
import { LeasesController } from './leases.controller.js';
import { OpsController } from './ops.controller.js';
import { ReportsController } from './reports.controller.js';
import { ReportsService } from './reports.service.js';
import { ScoringClient } from './scoring.client.js';

@Module({})
export class AppModule {
  static forRoot(config: DemoConfig): DynamicModule {
    const registry = new Registry();
    collectDefaultMetrics({ register: registry });
    return {
      module: AppModule,
      imports: [
        // Imported before LeaseModule on purpose: @Exclusive holds whatever the order (the scheduler captures the
        // decorated method, which is already the wrapper).
        ScheduleModule.forRoot(),
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: config.databaseUrl,
          entities: [JobResult, JobDigest, ...leaseEntities],
          migrations: [...leaseMigrations, CreateJobResult1764460800000, CreateJobDigest1764547200000],
          migrationsRun: true,
        }),
        TypeOrmModule.forFeature([JobResult, JobDigest]),
        // Demo timeouts are seconds so the tour is quick; production defaults are 30 s / 120 s.
        LeaseModule.forRoot({
          timing: { heartbeatIntervalMs: config.heartbeatIntervalMs, leaseTimeoutMs: config.leaseTimeoutMs },
          owner: `${config.instance}/${hostname()}/${process.pid}`,
          // Every instance journals its lease events: the console's timeline shows all of them.
          observability: { journal: true },
        }),
        // The operator's console: its page at /lease-console, reads and actions behind the demo's token guard (a real
        // app: its own auth), which the page asks the operator for and sends as x-console-token.
        LeaseConsoleModule.forRoot({
          guard: new ConsoleTokenGuard(config.consoleToken),
          actions: true,
          page: { headers: ['x-console-token'] },
        }),
        LeaseMetricsModule.forRoot({ registry }),
        TerminusModule,
      ],
      controllers: [ReportsController, LeasesController, OpsController, DashboardController],
      providers: [
        { provide: DEMO_CONFIG, useValue: config },
        // Maps LeaseBusyError from the background start (a provider method) to 409 + Retry-After.
        { provide: APP_FILTER, useClass: LeaseExceptionFilter },
        LeaseHealthIndicator,
        ActivityLog,
        ScoringClient,
        ReportsService,
        DigestService,
        ...(config.leader ? [LeaderRole] : []),
      ],
    };
  }
}
