import type { EntityManager } from 'typeorm';

/** Options of `Lease.fenced()`. */
export interface FencedOptions {
  /**
   * Release the lease in the same transaction, after `work` (its last save): one commit for the save and the release,
   * the next waiter woken by that commit. The lease ends locally once it commits; if `work` or the commit fails, the
   * lease is still held. Not inside an open `fenced()` of the same lease, nor on a reentrant call's lease.
   * @default false
   */
  release?: boolean;
}

/**
 * A held lease: the exclusive right over one target key until released, lost or expired. `AsyncDisposable`:
 * `await using lease = await leases.acquire(key)` releases it when the block ends, however it ends.
 */
export interface Lease extends AsyncDisposable {
  readonly targetKey: string;
  /** Lease token (UUID v4), fresh for each acquisition; proves ownership. Never log it. */
  readonly token: string;
  /** From a database sequence: a later acquisition of the same target always has a larger one, whatever the timing.
   * Use it to fence writes outside this database (idempotency keys, version columns of downstream systems). */
  readonly fencingToken: bigint;
  /** Aborted when the lease is lost (reason: `LeaseLostError`) or released. Pass it to `fetch` of the slow call. */
  readonly signal: AbortSignal;
  /**
   * The slot of a semaphore's lease (`limit` above 1): 0 … limit − 1, one holder per slot at a time; `fencingToken`
   * orders the acquisitions of this slot. Undefined for a single-holder lease.
   */
  readonly slot?: number;
  /**
   * A read-write lease's mode (`mode` of the call, docs/read-write.md): `'shared'` (one of the key's readers) or
   * `'exclusive'` (its writer). Undefined for a single holder's or a semaphore's lease.
   */
  readonly mode?: 'shared' | 'exclusive';
  /** True while the lease is ours by the local clock: not released, not lost, within the local safety deadline. */
  isHeld(): boolean;
  /**
   * Runs `work` in one transaction that first locks the lease row (`FOR UPDATE`) and checks the token. If the lease
   * is no longer ours, rejects with `LeaseLostError` and writes nothing. `work` must write through `manager`.
   * `{ release: true }`: the release rides on this transaction (see `FencedOptions`).
   */
  fenced<T>(work: (manager: EntityManager) => Promise<T>, options?: FencedOptions): Promise<T>;
  /** Releases the lease (token-guarded; idempotent; never touches a newer holder's row). */
  release(): Promise<void>;
  /**
   * `release()`, for `await using`. Never rejects: a lease already released or lost is left as it is, and a release
   * the database did not answer is retried in the background (as for `release()`), so the block's own error survives.
   */
  [Symbol.asyncDispose](): Promise<void>;
}
