/**
 * The lease heartbeat of one engine: one batched renewal per tick for every lease held, the server's history checked
 * in the same statement, and each lease confirmed, left to its local deadline, or lost. Collaborators given
 * explicitly: the backend, the options, the logger, the held leases, `lose` and the events of the engine.
 */
import type { Logger } from '@nestjs/common';
import { lastValueFrom, type Subscription } from 'rxjs';
import { errorText } from '../errors/lease.messages.js';
import type { EventSink } from './lease-events.js';
import type { EngineSettings } from '../options/engine-settings.js';
import type { LeaseBackend, RenewResult, ServerHistory } from '../core/backend.js';
import type { LoseLease } from './fenced-transaction.js';
import { batchedHeartbeat, type HeartbeatTick, renewTick } from './heartbeat.js';
import type { HeldLease } from './held-lease.js';

export class LeaseHeartbeat {
  private heartbeat?: Subscription;
  /**
   * The system identifier of the database cluster this process acquires leases in (null: not readable by the role).
   * Each lease's timeline is in its fencing token; together they are the history a renewal checks.
   */
  systemId: string | null = null;
  /** What the last renewal that found another history said about it, for the loss messages. */
  private failoverDetail?: string;

  constructor(
    private readonly backend: LeaseBackend,
    private readonly options: EngineSettings,
    private readonly logger: Logger,
    private readonly held: ReadonlyMap<string, HeldLease>,
    private readonly lose: LoseLease,
    /** The engine's events: built only when `hears` says someone listens. */
    private readonly events: EventSink,
    /** A renewal found another system identifier (another database cluster): see `BootstrapChecks.settleAgain`. */
    private readonly onNewSystem: () => void = () => undefined,
  ) {}

  get running(): boolean {
    return this.heartbeat !== undefined;
  }

  /**
   * Runs while leases are held. It stops at its first tick that finds none, not at the last release: a process that
   * acquires and releases in a loop keeps one heartbeat rather than building and tearing one down per lease.
   */
  start(): void {
    this.heartbeat ??= batchedHeartbeat(
      this.options.heartbeatIntervalMs,
      () => {
        if (this.held.size === 0) queueMicrotask(() => this.held.size === 0 && this.stop());
        return [...this.held.values()];
      },
      (batch) => this.renew(batch),
    ).subscribe((tick) => this.onHeartbeat(tick));
  }

  /** One renewal of every held lease now, outside the interval (the testing kit's controls: a loss heard at once). */
  async renewNow(): Promise<void> {
    const batch = [...this.held.values()];
    if (batch.length > 0) this.onHeartbeat(await lastValueFrom(renewTick(batch, (leases) => this.renew(leases))));
  }

  private renew(batch: HeldLease[]): Promise<RenewResult> {
    return this.backend
      .renew(
        batch.map((lease) => ({ ...lease.row, leaseTimeoutMs: lease.leaseTimeoutMs })),
        batch.map((lease) => lease.token),
        this.options.heartbeatIntervalMs,
        { fencingTokens: batch.map((lease) => lease.fencingToken), systemId: this.systemId },
      )
      .then((result) => this.noteHistory(result));
  }

  /**
   * A renewal that found the server in another history (see `LeaseStore.renew`): one line saying what changed; the
   * leases acquired before are lost in `onHeartbeat`. Leases acquired from now on belong to the server's system,
   * whose sequences may stand below the tokens its tables hold (`onNewSystem`).
   */
  private noteHistory(result: RenewResult): RenewResult {
    const here = result.history;
    if (!here || !result.failover?.size) return result;
    this.failoverDetail = describeChange(here, this.systemId);
    const newSystem = this.systemId !== null && here.systemId !== null && here.systemId !== this.systemId;
    this.logger.warn(
      `The database's history changed (${this.failoverDetail}): ${result.failover.size} lease(s) acquired before ` +
        'are lost (reason failover); their work must stop, their fenced writes are refused',
    );
    if (here.systemId !== null) this.systemId = here.systemId;
    if (newSystem) this.onNewSystem();
    return result;
  }

  stop(): void {
    this.heartbeat?.unsubscribe();
    this.heartbeat = undefined;
  }

  private onHeartbeat(tick: HeartbeatTick<HeldLease>): void {
    if (tick.error !== undefined) {
      this.logger.warn(
        `Heartbeat of ${tick.batch.length} lease(s) failed (${errorText(tick.error)}); retrying next tick`,
      );
      if (this.events.hears('renew-failed')) {
        this.events.emit({
          type: 'renew-failed',
          leases: tick.batch.length,
          error: errorText(tick.error),
          latencyMs: tick.latencyMs,
          at: new Date(),
        });
      }
      for (const lease of tick.batch) {
        lease.holder?.event('lease.renew_failed', {
          'lease.error': errorText(tick.error),
          'lease.batch_size': tick.batch.length,
          'lease.latency_ms': tick.latencyMs,
        });
      }
      return;
    }
    // One Date for the tick's events, and none when nobody hears them (a renewal of 5,000 leases builds no event).
    const at = this.events.hears('renewed') ? new Date() : undefined;
    for (const lease of tick.batch) {
      if (!lease.active) continue;
      if (tick.preempted?.has(lease.token)) {
        // Renewed or not, its work must stop: a preempting caller asked (or took over already).
        this.lose(lease, 'preempted');
      } else if (tick.kept?.has(lease.token)) {
        lease.confirm(tick.sentAt);
        if (at) {
          this.events.emit({
            type: 'renewed',
            targetKey: lease.targetKey,
            keyTemplate: lease.keyTemplate,
            fencingToken: lease.fencingToken,
            latencyMs: tick.latencyMs,
            at,
          });
        }
      } else if (tick.skipped?.has(lease.token)) {
        // Its row is locked (a fenced transaction of ours, usually): not renewed, not lost; the local deadline decides.
      } else if (tick.failover?.has(lease.token)) {
        this.lose(lease, 'failover', this.failoverDetail);
      } else if (tick.forced?.has(lease.token)) {
        this.lose(lease, 'released-by-operator');
      } else if (tick.expired?.has(lease.token)) {
        this.lose(lease, 'renewal-deadline');
      } else if (lease.releasingWithSave) {
        // Released by its fenced transaction's commit: the engine ends it as released.
      } else {
        this.lose(lease, 'taken-over');
      }
    }
  }
}

/** How the server's history differs from the leases': for log lines and `LeaseLostError` details. */
function describeChange(here: ServerHistory, systemId: string | null): string {
  if (here.recovery) return 'the server is in recovery: a standby, or a failover under way';
  if (systemId !== null && here.systemId !== null && here.systemId !== systemId) {
    return `another database cluster: system identifier ${systemId} → ${here.systemId}`;
  }
  return `the server is on timeline ${here.timeline}`;
}
