/**
 * Preemption (`onBusy: 'preempt'`, docs/preemption.md): a waiting call that may take its target over from a running
 * holder of strictly lower priority. Its refused attempts ask the holder to stop (a request on the holder's row,
 * which the holder's next renewal or fenced transaction finds; a holder of this process is told at once), wait in
 * line for its release up to the grace, then take the target over regardless with a higher fencing token. The line
 * is obeyed throughout: the statements refuse a caller a live waiter is ahead of. Collaborators given explicitly.
 */
import { randomUUID } from 'node:crypto';
import type { LeaseEvent } from '../interfaces/lease-event.interface.js';
import type { LeaseRequest } from '../options/call-input.js';
import type { AcquiredRow, AskedGrant, PreemptBackend, Preemptor } from '../core/backend.js';
import type { LoseLease } from './fenced-transaction.js';
import type { HeldLease } from './held-lease.js';
import { preemptedEvent } from './lease-events.js';
import type { Waiter } from './wait-queue.js';

/** What preemption needs of the engine. */
export interface PreemptionHost {
  /** This process's leases, by lease token. */
  readonly held: ReadonlyMap<string, HeldLease>;
  readonly lose: LoseLease;
  emit(event: LeaseEvent): void;
  /** Makes the lease of a grant (its heartbeat, its events), as for any acquisition. */
  adopt(request: LeaseRequest, leaseToken: string, row: AcquiredRow): Promise<HeldLease>;
}

/** A request made: the grant asked to stop, and when the grace ends (monotonic). */
interface Asked {
  readonly grant: AskedGrant;
  readonly at: number;
  readonly graceEnds: number;
}

/** One preempting call, as its waiter. */
interface PreemptingCall {
  readonly request: LeaseRequest;
  readonly graceMs: number;
  /** The request in force (cleared when the grant it names no longer holds the row: asked again). */
  asked?: Asked;
  /** The latest request made, for the `preempted` event of a grant in line. */
  lastAsked?: Asked;
}

export class Preemption {
  private readonly calls = new WeakMap<Waiter, PreemptingCall>();

  constructor(
    private readonly backend: PreemptBackend,
    private readonly owner: string,
    private readonly host: PreemptionHost,
  ) {}

  /** Makes `waiter`'s call a preempting one, with its grace. */
  track(waiter: Waiter, request: LeaseRequest, graceMs: number): void {
    this.calls.set(waiter, { request, graceMs });
  }

  /**
   * One attempt of `waiter` (`plain`, the acquire statement); for a preempting call, a refusal asks the holder to
   * stop (once per grant) or, past the grace, takes over. Refused, a preempting waiter wakes at the grace's end: its
   * `holdLeftMs` (when the wait wakes by itself) is cut to it.
   */
  async attempt(waiter: Waiter, plain: () => Promise<HeldLease | null>): Promise<HeldLease | null> {
    const lease = await plain();
    const call = this.calls.get(waiter);
    if (!call) return lease;
    if (lease) {
      if (call.lastAsked) this.preempted(lease, call, call.lastAsked, false);
      return lease;
    }
    return this.afterRefusal(waiter, call);
  }

  private async afterRefusal(waiter: Waiter, call: PreemptingCall): Promise<HeldLease | null> {
    const { targetKey, priority, holdMs, leaseTimeoutMs } = call.request;
    const caller: Preemptor = {
      targetKey,
      priority,
      waiterId: waiter.place && waiter.id,
      waiterSeq: waiter.place?.seq,
      leaseTimeoutMs,
    };
    if (!call.asked) {
      const grant = await this.backend.ask(caller);
      if (grant) {
        const at = performance.now();
        call.asked = call.lastAsked = { grant, at, graceEnds: at + call.graceMs };
        // A holder of this process hears it now, not at its next renewal.
        const local = this.host.held.get(grant.leaseToken);
        if (local) this.host.lose(local, 'preempted');
      }
    }
    const asked = call.asked;
    if (asked && performance.now() >= asked.graceEnds) {
      const leaseToken = randomUUID();
      const row = await this.backend.take(caller, leaseToken, holdMs, asked.grant);
      if (row) {
        const lease = await this.host.adopt(call.request, leaseToken, row);
        this.preempted(lease, call, asked, true);
        return lease;
      }
      // The grant asked no longer holds the row (released, expired, taken), or a waiter is ahead now: ask anew.
      call.asked = undefined;
    }
    if (call.asked) {
      const left = Math.max(0, call.asked.graceEnds - performance.now());
      waiter.holdLeftMs = Math.min(waiter.holdLeftMs ?? Infinity, left);
    }
    return null;
  }

  private preempted(lease: HeldLease, call: PreemptingCall, asked: Asked, forced: boolean): void {
    const waitedMs = performance.now() - asked.at;
    this.host.emit(preemptedEvent(lease, call.request.priority, this.owner, asked.grant, forced, waitedMs));
  }
}
