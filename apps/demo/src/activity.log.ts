import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { LeaseService } from 'nest-pg-lease';
import type { Subscription } from 'rxjs';
import { DEMO_CONFIG, type DemoConfig } from './demo.config.js';

/** What the dashboard's "recent events" and the tour read: lease events of this instance plus report outcomes. */
export interface Activity {
  /** Increasing per instance, so a reader can ask for what is new. */
  seq: number;
  at: string;
  instance: string;
  type: string;
  targetKey?: string;
  fencingToken?: string;
  detail?: string;
}

const KEPT = 200;

/** The last few hundred things that happened in this instance. Renewals are left out: they come every tick. */
@Injectable()
export class ActivityLog implements OnModuleDestroy {
  private readonly entries: Activity[] = [];
  private seq = 0;
  private readonly subscription: Subscription;

  constructor(
    @Inject(LeaseService) leases: LeaseService,
    @Inject(DEMO_CONFIG) private readonly config: DemoConfig,
  ) {
    this.subscription = leases.events$.subscribe((event) => {
      if (event.type === 'renewed') return;
      const { type, at, ...rest } = event;
      const fencingToken = 'fencingToken' in rest ? String(rest.fencingToken) : undefined;
      const targetKey = 'targetKey' in rest ? rest.targetKey : undefined;
      const detail =
        event.type === 'lost'
          ? `reason: ${event.reason}`
          : event.type === 'preempted'
            ? `fencing token ${event.previousFencingToken} → ${event.fencingToken}: priority ${event.previousPriority} ` +
              `preempted by ${event.priority}, ${event.forced ? 'taken over at the end of the grace' : 'released in the grace'}`
            : event.type === 'taken-over'
              ? `from ${event.previousOwner ?? 'an expired holder'}`
              : event.type === 'wait-ended'
                ? `${event.outcome} after ${Math.round(event.waitedMs)} ms (priority ${event.priority})`
                : event.type === 'waiting'
                  ? `priority ${event.priority}`
                  : event.type === 'renew-failed'
                    ? event.error
                    : undefined;
      this.add({ type, targetKey, fencingToken, detail }, at);
    });
  }

  add(entry: Omit<Activity, 'seq' | 'at' | 'instance'>, at = new Date()): void {
    this.entries.push({ seq: ++this.seq, at: at.toISOString(), instance: this.config.instance, ...entry });
    if (this.entries.length > KEPT) this.entries.shift();
  }

  /** Oldest first. */
  recent(afterSeq = 0): Activity[] {
    return this.entries.filter((entry) => entry.seq > afterSeq);
  }

  onModuleDestroy(): void {
    this.subscription.unsubscribe();
  }
}
