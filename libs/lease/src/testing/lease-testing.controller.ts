import { Inject, Injectable } from '@nestjs/common';
import { MemoryBackend } from '../core/memory/memory-backend.js';
import { engineOf } from '../engine-of.js';
import { LeaseEngine } from '../engine/lease-engine.js';
import type { LeaseLossReason } from '../interfaces/lease-loss-reason.interface.js';
import type { LeaseService } from '../lease.service.js';
import { callRequest } from '../options/call-input.js';
import { MemoryLeases } from './memory-leases.js';

/** The owner the controls name as "another process" unless told otherwise. */
export const OTHER_OWNER = 'another-process';

/**
 * The test's hand on the in-memory lease service (`LeaseTestingModule.forRoot()` provides it): plays the other
 * processes, so a unit test can make a key busy, or make a held lease be taken over, expire or be lost — the holder's
 * `signal` aborts with a `LeaseLostError` of that reason, and its next `fenced()` is refused. Each control changes the
 * memory backend's rows; the engine hears of a loss as from PostgreSQL, by a renewal (run at once here).
 */
@Injectable()
export class LeaseTestingController {
  // Explicit token: toolchains without decorator metadata (esbuild, tsx, vitest) could not inject by type.
  constructor(@Inject(MemoryLeases) private readonly leases: MemoryLeases) {}

  /** The controller of an in-memory `LeaseService` (one from `createTestingLeaseService`). */
  static of(service: LeaseService): LeaseTestingController {
    const engine = engineOf(service);
    const backend = engine instanceof LeaseEngine ? engine.backend : undefined;
    if (!(engine instanceof LeaseEngine) || !(backend instanceof MemoryBackend)) {
      throw new TypeError('LeaseTestingController.of: not an in-memory LeaseService (see createTestingLeaseService)');
    }
    return new LeaseTestingController({ engine, backend });
  }

  /** Another process holds `targetKey` (calls now find it busy) until `free(targetKey)`. Its fencing token. */
  hold(targetKey: string, owner = OTHER_OWNER): bigint {
    const token = this.leases.backend.hold(callRequest(targetKey, {}).targetKey, owner);
    this.renew();
    return token;
  }

  /**
   * Another process takes the key over with a higher fencing token: this service's holder loses it
   * (`'taken-over'`); the key stays the other's until `free(targetKey)`. The new fencing token.
   */
  takeOver(targetKey: string, owner = OTHER_OWNER): bigint {
    return this.hold(targetKey, owner);
  }

  /**
   * The key's lease expires: this service's holder loses it (`'renewal-deadline'`, as when its heartbeats could not
   * be confirmed in time), and the next acquisition is a takeover. Waiters are served. Every holder of the key
   * expires: a semaphore's slots, a read-write key's readers and writer.
   */
  expire(targetKey: string): void {
    this.leases.backend.expire(targetKey);
    this.renew();
  }

  /** This service's lease on `targetKey` is lost for `reason` (`'failover'`, say); the key becomes free. */
  lose(targetKey: string, reason: Exclude<LeaseLossReason, 'released'> = 'taken-over'): void {
    this.leases.backend.lose(targetKey, reason);
    this.renew();
  }

  /** The other process releases `targetKey` (from `hold` or `takeOver`); waiters are served. */
  free(targetKey: string): void {
    this.leases.backend.free(targetKey);
  }

  /** The engine's renewal, now: a holder hears of its loss at once (never rejects). */
  private renew(): void {
    void this.leases.engine.renewNow();
  }
}
