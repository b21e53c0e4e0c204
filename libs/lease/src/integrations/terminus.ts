import { Inject, Injectable } from '@nestjs/common';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { LeaseService } from '../lease.service.js';

/** Options of `LeaseHealthIndicator.isHealthy()`. */
export interface LeaseHealthOptions {
  /**
   * A lease of this process whose last heartbeat (database clock) is older than this is reported late, and the
   * indicator down: its holder is close to treating it as lost.
   * @default leaseTimeoutMs / 2
   */
  maxHeartbeatAgeMs?: number;
  /**
   * The database must answer within this time.
   * @default 3_000
   */
  timeoutMs?: number;
}

/**
 * `@nestjs/terminus` indicator: up when the lease tables answer now and every lease this process holds now (its
 * local view, `heldLeases()`) has a recent heartbeat; the details give the number of held leases and waiting calls.
 * Rows that name this process but are not held by it any more (a lease lost in an outage, a release that has not
 * landed yet) do not count: after a database outage the indicator is up again as soon as the database answers and
 * the heartbeats of what the process holds succeed. Add it to a module that imports
 * `TerminusModule`, and call it from a `@HealthCheck()` handler.
 *
 * Optional integration (needs `@nestjs/terminus`): import it from `nest-pg-lease/terminus`, never from the main entry.
 *
 * @example this.health.check([() => this.leaseHealth.isHealthy('leases')])
 */
@Injectable()
export class LeaseHealthIndicator {
  constructor(
    @Inject(LeaseService) private readonly leases: LeaseService,
    @Inject(HealthIndicatorService) private readonly indicators: HealthIndicatorService,
  ) {}

  isHealthy<const Key extends string>(key: Key, options: LeaseHealthOptions = {}): Promise<HealthIndicatorResult<Key>> {
    const maxAgeMs = options.maxHeartbeatAgeMs ?? this.leases.options.timing.leaseTimeoutMs / 2;
    return Promise.resolve(
      this.indicators
        .check(key)
        .attempt(async () => {
          const rows = await this.leases.list();
          // What the process holds now, by key and fencing token: a row of an older acquisition of the same key
          // (left by a release that failed) has a smaller token.
          const held = new Map<string, Set<bigint>>();
          for (const lease of this.leases.heldLeases()) {
            held.set(lease.targetKey, (held.get(lease.targetKey) ?? new Set()).add(lease.fencingToken));
          }
          const mine = rows.filter(
            (row) =>
              row.mine &&
              row.state === 'held' &&
              row.fencingToken !== undefined &&
              held.get(row.targetKey)?.has(row.fencingToken) === true,
          );
          const late = mine.filter((row) => row.sinceHeartbeatMs > maxAgeMs);
          if (late.length > 0) {
            const list = late.map((row) => `"${row.targetKey}" (${row.sinceHeartbeatMs} ms)`).join(', ');
            throw new Error(`heartbeats late (over ${maxAgeMs} ms): ${list}`);
          }
          return { held: mine.length, waiting: this.leases.waitingCount() };
        })
        .withTimeout(options.timeoutMs ?? 3_000),
    );
  }
}
