import { Inject, Injectable } from '@nestjs/common';
import { engineOf } from '../engine-of.js';
import type { LeaseLossReason } from '../interfaces/lease-loss-reason.interface.js';
import type { LeaseService } from '../lease.service.js';
import { InMemoryLeaseEngine } from './in-memory-engine.js';

/** The owner the controls name as "another process" unless told otherwise. */
export const OTHER_OWNER = 'another-process';

/**
 * The test's hand on the in-memory lease service (`LeaseTestingModule.forRoot()` provides it): plays the other
 * processes, so a unit test can make a key busy, or make a held lease be taken over, expire or be lost — the holder's
 * `signal` aborts with a `LeaseLostError` of that reason, and its next `fenced()` is refused.
 */
@Injectable()
export class LeaseTestingController {
  // Explicit token: toolchains without decorator metadata (esbuild, tsx, vitest) could not inject by type.
  constructor(@Inject(InMemoryLeaseEngine) private readonly engine: InMemoryLeaseEngine) {}

  /** The controller of an in-memory `LeaseService` (one from `createTestingLeaseService`). */
  static of(service: LeaseService): LeaseTestingController {
    const engine = engineOf(service);
    if (!(engine instanceof InMemoryLeaseEngine)) {
      throw new TypeError('LeaseTestingController.of: not an in-memory LeaseService (see createTestingLeaseService)');
    }
    return new LeaseTestingController(engine);
  }

  /** Another process holds `targetKey` (calls now find it busy) until `free(targetKey)`. Its fencing token. */
  hold(targetKey: string, owner = OTHER_OWNER): bigint {
    return this.engine.hold(targetKey, owner);
  }

  /**
   * Another process takes the key over with a higher fencing token: this service's holder loses it
   * (`'taken-over'`); the key stays the other's until `free(targetKey)`. The new fencing token.
   */
  takeOver(targetKey: string, owner = OTHER_OWNER): bigint {
    return this.engine.takeOver(targetKey, owner);
  }

  /**
   * The key's lease expires: this service's holder loses it (`'renewal-deadline'`, as when its heartbeats could not
   * be confirmed in time), and the next acquisition is a takeover. Waiters are served.
   */
  expire(targetKey: string): void {
    this.engine.expire(targetKey);
  }

  /** This service's lease on `targetKey` is lost for `reason` (`'failover'`, say); the key becomes free. */
  lose(targetKey: string, reason: Exclude<LeaseLossReason, 'released'> = 'taken-over'): void {
    this.engine.loseLease(targetKey, reason);
  }

  /** The other process releases `targetKey` (from `hold` or `takeOver`); waiters are served. */
  free(targetKey: string): void {
    this.engine.free(targetKey);
  }
}
