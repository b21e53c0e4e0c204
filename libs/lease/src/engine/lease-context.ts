import { AsyncLocalStorage } from 'node:async_hooks';
import type { Lease } from '../interfaces/lease.interface.js';

interface Frame {
  readonly lease: Lease;
  readonly parent?: Frame;
}

/**
 * The leases of the current call chain (AsyncLocalStorage), innermost first. `current()` is the innermost one;
 * `find(key)` makes nested `run`/`@Exclusive` on a key already held in the chain reentrant.
 */
export class LeaseContext {
  private readonly storage = new AsyncLocalStorage<Frame>();

  run<T>(lease: Lease, work: () => T): T {
    return this.storage.run({ lease, parent: this.storage.getStore() }, work);
  }

  current(): Lease | undefined {
    return this.storage.getStore()?.lease;
  }

  find(targetKey: string): Lease | undefined {
    for (let frame = this.storage.getStore(); frame; frame = frame.parent) {
      if (frame.lease.targetKey === targetKey && frame.lease.isHeld()) return frame.lease;
    }
    return undefined;
  }
}
