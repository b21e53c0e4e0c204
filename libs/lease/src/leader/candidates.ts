import type { ServiceEngine } from '../engine/service-engine.js';
import type { ElectOptions } from '../interfaces/leader-election.interface.js';
import { LeaderCandidate } from './leader-candidate.js';

/** One election this process takes part in, as the operator's console shows it. */
export interface ElectionView {
  readonly targetKey: string;
  /** A `@Sticky` owner's election (its term carries the decorated calls), not `elect()` / `@LeaderElection`. */
  readonly sticky: boolean;
  /** This process leads it now. */
  readonly leading: boolean;
}

/**
 * One application's leader candidates (`elect()`, `@LeaderElection`, `@Sticky`) over its engine, stopped together at
 * shutdown. A provider of LeaseModule (`LeaderCandidates`): the one its `LeaseService` holds, which the leader
 * explorer and the `@Sticky` door use too.
 */
export class LeaderCandidates {
  private readonly running = new Set<LeaderCandidate>();
  /** The sticky owners, by key: one candidate per key, made by the first call. */
  private readonly sticky = new Map<string, LeaderCandidate>();
  /** Set when the candidates were stopped (shutdown began): no sticky owner starts again. */
  private stopped = false;

  constructor(private readonly engine: ServiceEngine) {}

  /** Starts a candidate and keeps it until its loop ends. */
  start(targetKey: string, options: ElectOptions): LeaderCandidate {
    const candidate = new LeaderCandidate(this.engine, targetKey, options);
    this.running.add(candidate);
    void candidate.ended.then(() => this.running.delete(candidate));
    return candidate;
  }

  /**
   * Stops every candidate at once: leaders release their leases (graceful hand-over), except a sticky owner whose
   * call is in progress: it keeps its term until the call ends (or the drain's grace does).
   */
  async stop(): Promise<void> {
    this.stopped = true;
    this.sticky.clear();
    await Promise.all([...this.running].map((candidate) => candidate.stop()));
  }

  /**
   * `close()` of a service with its candidates (`LeaseService.close()`, the leader explorer at shutdown): the engine's
   * close (new calls refused, the drain) and the candidates' stop side by side — a leader hands over at once instead
   * of holding its idle term through the drain, and a sticky call in progress drains like any other call.
   */
  async closeWithEngine(): Promise<void> {
    await Promise.all([this.stop(), this.engine.close()]);
  }

  /** The sticky owner candidate of `targetKey` (started by the first call, in line until shutdown); undefined after. */
  stickyOwner(targetKey: string, options: Pick<ElectOptions, 'priority' | 'keyTemplate'>): LeaderCandidate | undefined {
    if (this.stopped) return undefined;
    let candidate = this.sticky.get(targetKey);
    if (!candidate) this.sticky.set(targetKey, (candidate = this.start(targetKey, options)));
    return candidate;
  }

  /**
   * The elections of the running candidates, one per key: which keys are leader keys is known only to the processes
   * that elect on them (a lease row does not say it).
   */
  elections(): ElectionView[] {
    const byKey = new Map<string, ElectionView>();
    for (const candidate of this.running) {
      const known = byKey.get(candidate.targetKey);
      byKey.set(candidate.targetKey, {
        targetKey: candidate.targetKey,
        sticky: this.sticky.has(candidate.targetKey),
        leading: (known?.leading ?? false) || candidate.isLeader,
      });
    }
    return [...byKey.values()].sort((a, b) => a.targetKey.localeCompare(b.targetKey));
  }
}
