/**
 * Where every attempt goes: the key's own row (limit 1), or a slot of a semaphore (`limit` above 1;
 * docs/semaphores.md); and a busy key's error, by limit. A limited call's attempts ask
 * for a slot (`SemaphoreStore.tryAcquire`) instead of the key's own row, and a granted slot is an ordinary lease
 * whose row is the slot's — renewed, fenced, lost and released like any other (see `HeldLease.row`). The waits of
 * limited calls are the key's ordinary line: only which statement an attempt sends differs.
 */
import { slotLimitOf } from '../errors/busy-details.js';
import { LeaseBusyError, LeaseLimitConflictError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import { keyTemplateOf, type LeaseRequest } from '../options/call-input.js';
import { modeOfLimit, OWN_ROW_SLOT } from '../options/slot-limits.js';
import type {
  AcquiredRow,
  AcquiredSlot,
  AcquireRequest,
  LeaseBackend,
  Refusal,
  RowRef,
  SlotRefusal,
} from '../core/backend.js';
import type { HeldLease } from './held-lease.js';
import type { Waiter } from './wait-queue.js';

/** The limits of this process's waiting calls (a waiter of a single-holder call has none). */
export class WaiterLimits {
  private readonly limits = new WeakMap<Waiter, number>();

  /** `waiter` waits for one of `limit` slots, or in a read-write mode (nothing to note for 1). */
  note(waiter: Waiter, limit: number): Waiter {
    if (limit !== 1) this.limits.set(waiter, limit);
    return waiter;
  }

  of(waiter: Waiter): number {
    return this.limits.get(waiter) ?? 1;
  }

  /** What a waiter of the line asks for (its limit as its call gave it). */
  requestOf(waiter: Waiter): LeaseRequest {
    const { targetKey, priority, holdAtLeastMs: holdMs } = waiter;
    return {
      targetKey,
      priority,
      holdMs,
      keyTemplate: keyTemplateOf(waiter.keyTemplate),
      limit: this.of(waiter),
      leaseTimeoutMs: waiter.leaseTimeoutMs,
    };
  }
}

/**
 * A slot's acquisition statement (`limit` above 1; batched by group commit like a single holder's, which the engine
 * sends to the backend's `attempt` itself; `onBatch` learns the batch's size). A slot refused because another limit
 * holds the key is the caller's `LeaseLimitConflictError`.
 */
export async function acquireSlot(
  backend: Pick<LeaseBackend, 'attemptSlot'>,
  request: AcquireRequest,
  limit: number,
  onBatch?: (size: number) => void,
): Promise<AcquiredSlot | Refusal> {
  const row: AcquiredSlot | SlotRefusal = await backend.attemptSlot(request, limit, onBatch);
  if ('refused' in row && row.heldLimit !== null) {
    throw new LeaseLimitConflictError(request.targetKey, limit, row.heldLimit);
  }
  return row;
}

/** A call refused without waiting: the key is held, or (`limit` above 1) all its slots are. */
export function busyError(targetKey: string, limit: number, retryAfterMs: number): LeaseBusyError {
  const mode = modeOfLimit(limit);
  const error = new LeaseBusyError(
    targetKey,
    retryAfterMs,
    mode ? messages.readWriteBusy(targetKey, mode) : limit > 1 ? messages.slotsBusy(targetKey, limit) : undefined,
  );
  if (limit > 1) slotLimitOf.set(error, limit);
  return error;
}

/** The row a grant took: the key's own, or a slot's. */
export function rowOf(row: AcquiredRow | AcquiredSlot, targetKey: string): RowRef {
  return { targetKey, slot: 'rowSlot' in row ? row.rowSlot : OWN_ROW_SLOT };
}

/** Marks `lease` as the slot its grant took, if it took one, and its read-write mode (`limit` 0 or -1). */
export function markSlot(lease: HeldLease, row: AcquiredRow | AcquiredSlot, limit: number): void {
  if ('rowSlot' in row) lease.rowSlot = row.rowSlot;
  lease.mode = modeOfLimit(limit);
}
