import { Inject, Injectable, Logger } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { Exclusive, type Lease, LeaseLostError, LeaseService } from 'nest-pg-lease';
import type { Repository } from 'typeorm';
import { ActivityLog } from './activity.log.js';
import { DEMO_CONFIG, type DemoConfig } from './demo.config.js';
import { JobResult } from './job-result.entity.js';
import { ScoringClient } from './scoring.client.js';

export interface ReportRequest {
  /** Overrides the scoring API's latency for this call (the tour uses it to make runs long or short). */
  latencyMs?: number;
  /** Admin reports only: place in the user's waiting line (higher first). */
  priority?: number;
}

/** One lease per user: every way of building a user's report excludes every other, on every instance. */
export const reportKey = (userId: number) => `report:user:${userId}`;

/** How long an admin report waits its turn before giving up. */
const ADMIN_WAIT_MS = 60_000;

/** "Build a report for user N": a slow external call, then a fenced save of the result. */
@Injectable()
export class ReportsService {
  private readonly logger = new Logger(ReportsService.name);

  constructor(
    @Inject(LeaseService) private readonly leases: LeaseService,
    @InjectRepository(JobResult) private readonly results: Repository<JobResult>,
    @Inject(ScoringClient) private readonly scoring: ScoringClient,
    @Inject(ActivityLog) private readonly activity: ActivityLog,
    @Inject(DEMO_CONFIG) private readonly config: DemoConfig,
  ) {}

  /**
   * Starts `build` in the background and resolves with its lease as soon as the lease is held, so an endpoint can
   * truthfully answer 202 — or rejects with `LeaseBusyError` (409) when another run holds the user.
   */
  start(userId: number, request: ReportRequest = {}): Promise<Lease> {
    return new Promise((resolve, reject) => {
      // After `resolve`, a later rejection of the background run is a no-op here; `produce` has recorded it.
      this.build(userId, request, resolve).catch(reject);
    });
  }

  /**
   * The decorated service method: wrapped at bootstrap, so whoever calls it runs under the user's lease (heartbeats
   * included) and gets `LeaseBusyError` at once when another run holds it. No priority: a second click is refused.
   */
  @Exclusive('report:user:{0}')
  async build(userId: number, request: ReportRequest = {}, onLeaseHeld?: (lease: Lease) => void): Promise<JobResult> {
    const lease = this.leases.current()!;
    onLeaseHeld?.(lease);
    return this.produce(userId, lease, request);
  }

  /**
   * Admin: waits its turn in the user's line (higher priority first, then first come first served) and builds.
   * Runs in the background; the lease events show when it is granted.
   */
  enqueue(userId: number, priority: number, request: ReportRequest = {}): void {
    this.leases
      .run(reportKey(userId), (lease) => this.produce(userId, lease, { ...request, priority }), {
        priority,
        onBusy: { wait: { timeoutMs: ADMIN_WAIT_MS } },
      })
      .catch((error: unknown) =>
        this.logger.warn(`Admin report for user ${userId} ended without a save: ${String(error)}`),
      );
  }

  /**
   * Admin: an urgent rebuild (docs/preemption.md). It does not wait for a running report of lower priority: that
   * run is told to stop (its scoring call is cancelled, its save refused) and this one builds with a higher fencing
   * token as soon as the running one lets go, or at the end of the grace whatever it does.
   */
  rebuildUrgently(userId: number, priority: number, request: ReportRequest = {}): void {
    this.leases
      .run(reportKey(userId), (lease) => this.produce(userId, lease, { ...request, priority }), {
        priority,
        onBusy: { preempt: { waitTimeoutMs: ADMIN_WAIT_MS } },
      })
      .catch((error: unknown) =>
        this.logger.warn(`Urgent report for user ${userId} ended without a save: ${String(error)}`),
      );
  }

  /**
   * The work under a held lease. The lease's signal goes to the external call, so a lost lease cancels it; the
   * save is fenced, so a run that lost its lease writes nothing even if it gets this far.
   */
  async produce(userId: number, lease: Lease, request: ReportRequest = {}): Promise<JobResult> {
    const fencingToken = String(lease.fencingToken);
    const note = (type: string, detail?: string) =>
      this.activity.add({ type, targetKey: lease.targetKey, fencingToken, detail });
    note('report-started', `user ${userId}, priority ${request.priority ?? 0}`);
    try {
      const score = await this.scoring.score(userId, { signal: lease.signal, latencyMs: request.latencyMs });
      const saved = await lease.fenced((manager) =>
        manager.getRepository(JobResult).save(
          manager.getRepository(JobResult).create({
            userId,
            fencingToken,
            score,
            instance: this.config.instance,
            priority: request.priority ?? 0,
          }),
        ),
      );
      note('report-saved', `user ${userId}: score ${score}`);
      return saved;
    } catch (error) {
      const lost =
        error instanceof LeaseLostError
          ? error
          : lease.signal.reason instanceof LeaseLostError
            ? lease.signal.reason
            : undefined;
      if (lost) note('report-discarded', `lease lost (${lost.reason}): scoring call cancelled, nothing saved`);
      else note('report-failed', String(error));
      throw error;
    }
  }

  /** The user's saved reports, newest (largest fencing token) first. */
  history(userId: number): Promise<JobResult[]> {
    return this.results.find({ where: { userId }, order: { fencingToken: 'DESC' } });
  }
}
