import type { EntitySchema } from 'typeorm';
import { leaseEntitySchemas } from './lease-schema.js';
import { type LeaseNames, resolveLeaseNames } from '../options/lease-names.js';

/** A row of the lease table (for reading it with TypeORM; the library itself writes it with SQL). */
export interface LeaseRow {
  targetId: string;
  /** null once released: the row stays (until purged, see docs/purging.md), with the last fencing token of its key. */
  leaseToken: string | null;
  fencingToken: string;
  owner: string;
  priority: number;
  leaseTimeoutMs: number;
  acquiredAt: Date;
  updatedAt: Date;
  /** holdAtLeastMs of the acquisition: the target stays taken until acquiredAt + holdMs, released or not. */
  holdMs: number;
  /** A semaphore's slot row: the limit it was granted under; null on a key's own row. */
  slotLimit: number | null;
  /**
   * With `targetId`, the row's primary key: 0 for a key's own row (its single holder), `i + 1` for slot `i` of a
   * semaphore (`Lease.slot`), -1 for the purge's high-water row.
   */
  slot: number;
}

/** A row of the waiter table. */
export interface LeaseWaiterRow {
  targetId: string;
  waiterId: string;
  owner: string;
  priority: number;
  timeoutMs: number;
  queuedAt: Date;
  seq: string;
  heartbeatAt: Date;
}

/**
 * Entity schemas of the two tables for the given names (validated like the module's options), derived from the one
 * description in lease-schema.ts: the same columns, CHECK constraints and order index as the migration, so TypeORM's
 * schema diff (`synchronize`, `migration:generate`) finds nothing to change. Use the names of `LeaseModule.forRoot()`.
 */
export function createLeaseEntities(
  names: Partial<LeaseNames> = {},
): [EntitySchema<LeaseRow>, EntitySchema<LeaseWaiterRow>] {
  return leaseEntitySchemas<LeaseRow, LeaseWaiterRow>(resolveLeaseNames(names));
}

/** Entity schemas for the default names. */
export const leaseEntities = createLeaseEntities();
