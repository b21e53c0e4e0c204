import { EntitySchema } from 'typeorm';
import type { LeaseNames } from './lease-store.js';
import { resolveLeaseOptions } from './lease.options.js';

/** A row of the lease table (for reading it with TypeORM; the library itself writes it with SQL). */
export interface LeaseRow {
  targetId: string;
  /** null once released: the row stays, with the last fencing token of its key. */
  leaseToken: string | null;
  fencingToken: string;
  owner: string;
  priority: number;
  leaseTimeoutMs: number;
  acquiredAt: Date;
  updatedAt: Date;
  /** holdAtLeastMs of the acquisition: the target stays taken until acquiredAt + holdMs, released or not. */
  holdMs: number;
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

/** Entity schemas of the two tables, so a DataSource knows them (and schema diffing leaves them alone). */
export function createLeaseEntities(
  names: Partial<LeaseNames> = {},
): [EntitySchema<LeaseRow>, EntitySchema<LeaseWaiterRow>] {
  const { schema, tableName, waiterTableName } = resolveLeaseOptions(names);
  const lease = new EntitySchema<LeaseRow>({
    name: `LeaseRow:${schema}.${tableName}`,
    tableName,
    schema,
    columns: {
      targetId: { name: 'target_id', type: 'text', primary: true },
      leaseToken: { name: 'lease_token', type: 'uuid', nullable: true },
      fencingToken: { name: 'fencing_token', type: 'bigint' },
      owner: { type: 'text' },
      priority: { type: 'integer', default: 0 },
      leaseTimeoutMs: { name: 'lease_timeout_ms', type: 'integer' },
      acquiredAt: { name: 'acquired_at', type: 'timestamptz' },
      updatedAt: { name: 'updated_at', type: 'timestamptz' },
      holdMs: { name: 'hold_ms', type: 'integer', default: 0 },
    },
  });
  const waiter = new EntitySchema<LeaseWaiterRow>({
    name: `LeaseWaiterRow:${schema}.${waiterTableName}`,
    tableName: waiterTableName,
    schema,
    columns: {
      targetId: { name: 'target_id', type: 'text', primary: true },
      waiterId: { name: 'waiter_id', type: 'uuid', primary: true },
      owner: { type: 'text' },
      priority: { type: 'integer' },
      timeoutMs: { name: 'timeout_ms', type: 'integer' },
      queuedAt: { name: 'queued_at', type: 'timestamptz' },
      seq: { type: 'bigint' },
      heartbeatAt: { name: 'heartbeat_at', type: 'timestamptz' },
    },
    indices: [{ name: `${waiterTableName}_order_idx`, columns: ['targetId', 'priority', 'seq'] }],
  });
  return [lease, waiter];
}

/** Entity schemas for the default names. */
export const leaseEntities = createLeaseEntities();
