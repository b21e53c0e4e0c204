import { Inject, Injectable, Logger } from '@nestjs/common';
import { type Lease, LeaderElection, type LeadershipEndReason, type OnLeadership } from 'nest-pg-lease';
import { DEMO_CONFIG, type DemoConfig } from './demo.config.js';

/**
 * The demo's leader role (issue 23): every instance stands for `demo:leader`; the one elected logs it, and its lease
 * row shows on the dashboard (holder, term). Stop that instance and another takes over at once (graceful stop) or
 * after the lease timeout (a crash); the `elected` / `revoked` events show in each instance's recent events.
 */
@LeaderElection('demo:leader')
@Injectable()
export class LeaderRole implements OnLeadership {
  private readonly logger = new Logger(LeaderRole.name);

  constructor(@Inject(DEMO_CONFIG) private readonly config: DemoConfig) {}

  onElected(lease: Lease): void {
    this.logger.log(`Instance ${this.config.instance} leads demo:leader (term ${lease.fencingToken})`);
  }

  onRevoked(reason: LeadershipEndReason): void {
    this.logger.log(`Instance ${this.config.instance} no longer leads demo:leader (${reason})`);
  }
}
