import { Inject, Injectable } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { InjectRepository } from '@nestjs/typeorm';
import { Exclusive, LeaseService } from 'nest-pg-lease';
import type { Repository } from 'typeorm';
import { ActivityLog } from './activity.log.js';
import { DEMO_CONFIG, DIGEST_SCHEDULE, type DemoConfig } from './demo.config.js';
import { JobDigest } from './job-digest.entity.js';
import { JobResult } from './job-result.entity.js';

/** The scheduled job's target key: one digest at a time across every instance. */
export const DIGEST_KEY = 'digest:reports';

/**
 * A nightly-style digest, run every few seconds so it can be watched: every instance's scheduler fires it, exactly
 * one instance runs each tick. `holdAtLeastMs` keeps the target taken after the (fast) run, so an instance whose
 * clock or timer is a little behind finds it still taken; it must exceed the clock skew between instances plus timer
 * jitter and stay below the period (the shortest period the demo allows is one second). `onBusy: 'skip'` makes the
 * other instances skip quietly — a `busy` event, no error in the log.
 */
@Injectable()
export class DigestService {
  constructor(
    @Inject(LeaseService) private readonly leases: LeaseService,
    @InjectRepository(JobDigest) private readonly digests: Repository<JobDigest>,
    @Inject(ActivityLog) private readonly activity: ActivityLog,
    @Inject(DEMO_CONFIG) private readonly config: DemoConfig,
  ) {}

  @Cron(DIGEST_SCHEDULE.cron, { name: 'digest', disabled: DIGEST_SCHEDULE.disabled })
  @Exclusive(DIGEST_KEY, { holdAtLeastMs: 800, onBusy: 'skip' })
  async run(): Promise<void> {
    const lease = this.leases.current()!;
    const saved = await lease.fenced(async (manager) => {
      const last = await manager.getRepository(JobDigest).findOne({ where: {}, order: { fencingToken: 'DESC' } });
      const reports = await manager
        .getRepository(JobResult)
        .createQueryBuilder('result')
        .where('result.savedAt > :since', { since: last?.createdAt ?? new Date(0) })
        .getCount();
      return manager
        .getRepository(JobDigest)
        .save({ fencingToken: String(lease.fencingToken), instance: this.config.instance, reports });
    });
    this.activity.add({
      type: 'digest-saved',
      targetKey: DIGEST_KEY,
      fencingToken: saved.fencingToken,
      detail: `${saved.reports} new report(s)`,
    });
  }

  /** The latest digests, newest first (the database's view: every instance's runs). */
  recent(limit = 8): Promise<JobDigest[]> {
    return this.digests.find({ order: { fencingToken: 'DESC' }, take: limit });
  }
}
