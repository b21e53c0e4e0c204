import { Controller, Get, HttpCode, Inject, Logger, ParseIntPipe, Post, Query } from '@nestjs/common';
import { LeaseService, type LeaseSnapshot } from 'nest-pg-lease';
import { ActivityLog } from './activity.log.js';
import { DEMO_CONFIG, DIGEST_SCHEDULE, type DemoConfig } from './demo.config.js';
import { DigestService } from './digest.service.js';

/** JSON has no bigint: fencing tokens travel as strings. */
function snapshotView(row: LeaseSnapshot) {
  return { ...row, fencingToken: row.fencingToken === undefined ? undefined : String(row.fencingToken) };
}

/** What the dashboard polls, and the demo-only "kill this instance" button. */
@Controller('api')
export class LeasesController {
  private readonly logger = new Logger(LeasesController.name);

  constructor(
    @Inject(LeaseService) private readonly leases: LeaseService,
    @Inject(ActivityLog) private readonly activity: ActivityLog,
    @Inject(DigestService) private readonly digest: DigestService,
    @Inject(DEMO_CONFIG) private readonly config: DemoConfig,
  ) {}

  /** Holders and waiters of every instance (the database's view), waiters in grant order. */
  @Get('leases')
  async list() {
    return (await this.leases.list()).map(snapshotView);
  }

  /** Everything the dashboard shows from this instance in one answer. */
  @Get('state')
  async state(@Query('after', new ParseIntPipe({ optional: true })) after?: number) {
    return {
      instance: this.config.instance,
      owner: this.leases.options.owner,
      pid: process.pid,
      heartbeatIntervalMs: this.leases.options.timing.heartbeatIntervalMs,
      leaseTimeoutMs: this.leases.options.timing.leaseTimeoutMs,
      peers: this.config.peers,
      leases: (await this.leases.list()).map(snapshotView),
      events: this.activity.recent(after),
      digest: {
        schedule: DIGEST_SCHEDULE.label,
        runs: (await this.digest.recent()).map((run) => ({
          fencingToken: run.fencingToken,
          instance: run.instance,
          reports: run.reports,
          at: run.createdAt,
        })),
      },
    };
  }

  /** Demo only: dies like a crashed process (SIGKILL), leases still in the table, no release, no goodbye. */
  @Post('kill')
  @HttpCode(202)
  kill() {
    this.logger.warn('Killed from the dashboard (SIGKILL)');
    setTimeout(() => process.kill(process.pid, 'SIGKILL'), 100);
    return { status: 'killing', instance: this.config.instance, pid: process.pid };
  }
}
