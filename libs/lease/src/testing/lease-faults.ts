/**
 * Faults for an application's integration tests on a real PostgreSQL: make a held lease be taken over, expire, or
 * have its row stall — each as another process or the database would, through the DataSource, so the holder finds out
 * the way it would in production (its heartbeat), and the test can check its own lost-lease path: the signal aborts,
 * the fenced save is refused.
 */
import type { DataSource, QueryRunner } from 'typeorm';
import { LeaseArgumentError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { LeaseModuleOptions } from '../interfaces/lease-module-options.interface.js';
import { assertTargetKey } from '../options/call-input.js';
import { resolveLeaseNames } from '../options/lease-names.js';
import { expireSql, lockRowSql, takeOverSql } from './lease-faults.sql.js';
import { OTHER_OWNER } from './lease-testing.controller.js';

/** Which tables the helpers write (the module's `schema` / `tableName` / `waiterTableName`, defaults otherwise). */
export type LeaseTableNames = Omit<NonNullable<LeaseModuleOptions['tables']>, 'createSchema'>;

export interface TakeOverOptions extends LeaseTableNames {
  /** The owner the row names afterwards. @default 'another-process' */
  owner?: string;
}

/** A stall made by `stallDatabase`: the lease row stays locked until `release()`. */
export interface DatabaseStall {
  release(): Promise<void>;
}

function rowsOf(result: unknown): Array<Record<string, string>> {
  // TypeORM's postgres driver answers an UPDATE … RETURNING with [rows, count].
  const rows = Array.isArray(result) && Array.isArray(result[0]) ? (result[0] as unknown[]) : (result as unknown[]);
  return rows as Array<Record<string, string>>;
}

function noRow(targetKey: string, what: string): LeaseArgumentError {
  return new LeaseArgumentError(messages.noLeaseRow(what, targetKey), targetKey);
}

/**
 * Another process takes `targetKey` over: its row gets a new lease token, `owner` and a higher fencing token. The
 * holder's next heartbeat finds another token: its signal aborts with `LeaseLostError` (`'taken-over'`), and its
 * fenced saves are refused from now on. Resolves with the new fencing token.
 */
export async function takeOver(
  dataSource: DataSource,
  targetKey: string,
  options: TakeOverOptions = {},
): Promise<bigint> {
  assertTargetKey(targetKey);
  const rows = rowsOf(
    await dataSource.query(takeOverSql(resolveLeaseNames(options)), [targetKey, options.owner ?? OTHER_OWNER]),
  );
  if (rows.length === 0) throw noRow(targetKey, 'takeOver');
  return BigInt(rows[0].fencing_token);
}

/**
 * The lease on `targetKey` expires: its row's last heartbeat moves past its timeout (so do the key's other held rows:
 * a semaphore's slots, a read-write key's readers and writer). The holder's next heartbeat finds it expired: its
 * signal aborts with `LeaseLostError` (`'renewal-deadline'`); the key is free for others.
 */
export async function expire(dataSource: DataSource, targetKey: string, names: LeaseTableNames = {}): Promise<void> {
  assertTargetKey(targetKey);
  const rows = rowsOf(await dataSource.query(expireSql(resolveLeaseNames(names)), [targetKey]));
  if (rows.length === 0) throw noRow(targetKey, 'expire');
}

/**
 * The database stalls for `targetKey`: another session locks its lease row until `release()`. Renewals cannot
 * confirm it, so the holder loses the lease at its local deadline (`leaseTimeoutMs − safetyMarginMs`,
 * `'renewal-deadline'`), and a fenced save waits, then is refused. Always `release()` (in a `finally`).
 */
export async function stallDatabase(
  dataSource: DataSource,
  targetKey: string,
  names: LeaseTableNames = {},
): Promise<DatabaseStall> {
  assertTargetKey(targetKey);
  const sql = lockRowSql(resolveLeaseNames(names));
  const runner: QueryRunner = dataSource.createQueryRunner();
  let released = false;
  const release = async () => {
    if (released) return;
    released = true;
    try {
      if (runner.isTransactionActive) await runner.rollbackTransaction();
    } finally {
      await runner.release();
    }
  };
  try {
    await runner.connect();
    await runner.startTransaction();
    const rows = rowsOf(await runner.query(sql, [targetKey]));
    if (rows.length === 0) throw noRow(targetKey, 'stallDatabase');
  } catch (error) {
    await release();
    throw error;
  }
  return { release };
}
