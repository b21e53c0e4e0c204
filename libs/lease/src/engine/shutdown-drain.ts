/**
 * The drain of `close()`: once new calls are refused and waits settled, the leases still held — a `run` or
 * `@Exclusive` call in progress, a handle from `acquire()` / `tryAcquire()` its user has not released — keep their
 * rows and their heartbeats until each is released or lost, or until `shutdownGraceMs` passes; the engine then aborts
 * and releases what is left. Collaborators given explicitly: the engine's map of held leases (it calls `forgotten()`
 * whenever it drops one) and its logger.
 */
import type { Logger } from '@nestjs/common';
import { longTimeout } from '../util/settle-by.js';

export class ShutdownDrain {
  /** Checks whether the drain is over; set while `wait` runs. */
  private check?: () => void;
  /** The drain has ended: what is left is aborted and released, and a failed release is no longer retried. */
  ended = false;

  constructor(
    private readonly held: ReadonlyMap<unknown, unknown>,
    private readonly logger: Logger,
  ) {}

  /**
   * Resolves once no lease is held, or `graceMs` after the call, whichever comes first. The grace timer is not
   * unref'd: it is a step of `close()`, which the process is waiting for.
   */
  async wait(graceMs: number): Promise<void> {
    if (this.held.size > 0 && graceMs > 0) {
      this.logger.log(`Shutdown: waiting up to ${graceMs} ms for ${this.held.size} lease(s) in use to be released`);
      await new Promise<void>((resolve) => {
        const cancel = longTimeout(() => {
          this.logger.warn(
            `Shutdown: ${this.held.size} lease(s) still in use after shutdownGraceMs (${graceMs} ms): ` +
              'aborting and releasing them',
          );
          this.check = undefined;
          resolve();
        }, graceMs);
        this.check = () => {
          if (this.held.size > 0) return;
          this.check = undefined;
          cancel();
          resolve();
        };
      });
    }
    this.ended = true;
  }

  /** The engine dropped a lease from its map (released or lost). */
  forgotten(): void {
    this.check?.();
  }
}
