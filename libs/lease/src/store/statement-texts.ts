/**
 * Every statement text of one set of table names, built once (they depend only on the names and the settings — the
 * timeline, the purge bound, the test-only faults — given to the builders as arguments: every value is a bound
 * parameter), and the names of the prepared ones. Pure: no I/O.
 */
import { createHash } from 'node:crypto';
import type { EngineSettings } from '../options/engine-settings.js';
import { acquireRunCapMs, PURGE_AFTER_MS } from '../options/bounds.js';
import { leaseObjectNames } from '../schema/lease-schema.js';
import { batchAcquireSql, loneAcquireSql, singleAcquireSql } from './sql/acquire.sql.js';
import {
  MAY_CREATE_SCHEMA_SQL,
  MISSING_OBJECTS_SQL,
  missingPrivilegesSql,
  type PrivilegeCheck,
  privilegeChecks,
  SYSTEM_ID_READABLE_SQL,
} from './sql/bootstrap.sql.js';
import { lockForFenceSql, lockManyForFenceSql } from './sql/fence.sql.js';
import { serverHistorySql, tableTopsSql, timelineSql, WAL_PROBE_SQL, WAL_READABLE_SQL } from './sql/fencing-token.js';
import type { LeaseObjectNames } from './sql/fragments.js';
import { largestTokenSql, purgeSql } from './sql/purge.sql.js';
import { raiseSequencesSql } from './sql/token-floor.sql.js';
import { confirmGrantSql } from './sql/handoff.sql.js';
import { batchReleaseSql, loneReleaseSql, parkingReleaseSql, singleReleaseSql } from './sql/release.sql.js';
import { preemptAskSql, preemptTakeSql } from './sql/preempt.sql.js';
import { renewSql } from './sql/renew.sql.js';
import {
  semaphoreAcquireSql,
  semaphoreBatchAcquireSql,
  semaphoreBatchReleaseSql,
  semaphoreReleaseSql,
} from './sql/semaphore.sql.js';
import { exclusiveAcquireSql, sharedAcquireSql } from './sql/read-write.sql.js';
import { snapshotSql } from './sql/snapshot.sql.js';
import { NO_FAULTS, type StatementFaults } from './sql/statement-faults.js';
import { dequeueAllSql, dequeueSql, enqueueSql, renewWaitersSql } from './sql/waiters.sql.js';

/** The texts of one configuration's statements, by statement. */
export interface StatementTexts {
  readonly acquire: string;
  readonly acquireLone: string;
  readonly acquireOrQueue: string;
  readonly batchAcquire: string;
  readonly batchRelease: string;
  readonly release: string;
  readonly releaseAndPark: string;
  readonly releaseLone: string;
  readonly enqueue: string;
  readonly renew: string;
  readonly renewWithoutSystemId: string;
  readonly renewWaiters: string;
  readonly dequeue: string;
  readonly dequeueAll: string;
  readonly confirmGrant: string;
  readonly snapshot: string;
  readonly lockForFence: string;
  readonly lockManyForFence: string;
  readonly preemptAsk: string;
  readonly preemptTake: string;
  readonly serverHistory: string;
  readonly serverHistoryWithoutSystemId: string;
  readonly systemIdReadable: string;
  readonly walReadable: string;
  readonly walProbe: string;
  readonly tableTops: string;
  readonly raiseSequences: string;
  readonly purge: string;
  readonly largestToken: string;
  readonly missingObjects: string;
  readonly missingPrivileges: string;
  readonly mayCreateSchema: string;
  readonly semaphoreAcquire: string;
  readonly semaphoreBatchAcquire: string;
  readonly semaphoreRelease: string;
  readonly semaphoreBatchRelease: string;
  readonly sharedAcquire: string;
  readonly exclusiveAcquire: string;
}

/** The statements of one set of names: their texts, the rights `missingPrivileges` checks, how they are named. */
export interface Statements {
  readonly names: LeaseObjectNames;
  readonly sql: StatementTexts;
  /** The rights checked by `missingPrivileges`, in the order of its statement's parameters. */
  readonly privileges: readonly PrivilegeCheck[];
  /** The name of a hot statement, for `pg` to prepare it once per connection ({} behind a transaction pooler). */
  readonly named: (statement: string) => { name?: string };
}

/**
 * The prefix of the prepared statements' names: a hash of the table names, so two configurations never share a
 * prepared plan.
 */
export function preparedPrefix(options: Pick<EngineSettings, 'schema' | 'tableName' | 'waiterTableName'>) {
  const names = `${options.schema}.${options.tableName}.${options.waiterTableName}`;
  return `lease_${createHash('sha1').update(names).digest('hex').slice(0, 10)}`;
}

/** What a store's statements are built for, beside the names (every field optional: the library's defaults). */
export interface StatementSettings {
  /**
   * Where the server's timeline cannot be used (see `settleTokens`): the fixed timeline every statement uses instead
   * of the server's (`timelineSql`); the WAL probe keeps the server's.
   */
  readonly timeline?: bigint;
  /** The purge bound (`PURGE_AFTER_MS`; tests give a shorter one): its acquisitions' run cap is half. */
  readonly purgeAfterMs?: number;
  /** Test-only defects (the fault schedule's negative controls, see statement-faults.ts). */
  readonly faults?: StatementFaults;
}

export function buildStatements(options: EngineSettings, settings: StatementSettings = {}): Statements {
  const { purgeAfterMs = PURGE_AFTER_MS, faults = NO_FAULTS } = settings;
  const capMs = acquireRunCapMs(purgeAfterMs);
  const timeline = timelineSql(settings.timeline);
  const n = leaseObjectNames(options);
  const privileges = privilegeChecks(n, options.schema);
  const sql: StatementTexts = {
    acquire: singleAcquireSql(n, timeline, false, capMs, faults),
    acquireLone: loneAcquireSql(n, timeline, capMs, faults),
    acquireOrQueue: singleAcquireSql(n, timeline, true, capMs, faults),
    batchAcquire: batchAcquireSql(n, timeline, capMs),
    batchRelease: batchReleaseSql(n, timeline),
    release: singleReleaseSql(n, timeline),
    releaseAndPark: parkingReleaseSql(n, timeline),
    releaseLone: loneReleaseSql(n),
    enqueue: enqueueSql(n, timeline),
    renew: renewSql(n, true, timeline, faults),
    renewWithoutSystemId: renewSql(n, false, timeline, faults),
    renewWaiters: renewWaitersSql(n),
    dequeue: dequeueSql(n, timeline),
    dequeueAll: dequeueAllSql(n, timeline),
    confirmGrant: confirmGrantSql(n),
    snapshot: snapshotSql(n),
    lockForFence: lockForFenceSql(n, timeline),
    lockManyForFence: lockManyForFenceSql(n, timeline),
    preemptAsk: preemptAskSql(n),
    preemptTake: preemptTakeSql(n, timeline, capMs),
    serverHistory: serverHistorySql(true, timeline),
    serverHistoryWithoutSystemId: serverHistorySql(false, timeline),
    systemIdReadable: SYSTEM_ID_READABLE_SQL,
    missingObjects: MISSING_OBJECTS_SQL,
    missingPrivileges: missingPrivilegesSql(privileges),
    mayCreateSchema: MAY_CREATE_SCHEMA_SQL,
    walReadable: WAL_READABLE_SQL,
    walProbe: WAL_PROBE_SQL,
    tableTops: tableTopsSql(n.lease, n.waiter),
    raiseSequences: raiseSequencesSql(n),
    purge: purgeSql(n),
    largestToken: largestTokenSql(n),
    semaphoreAcquire: semaphoreAcquireSql(n, timeline, capMs),
    semaphoreBatchAcquire: semaphoreBatchAcquireSql(n, timeline, capMs),
    semaphoreRelease: semaphoreReleaseSql(n),
    semaphoreBatchRelease: semaphoreBatchReleaseSql(n),
    sharedAcquire: sharedAcquireSql(n, timeline, capMs, faults),
    exclusiveAcquire: exclusiveAcquireSql(n, timeline, capMs),
  };
  // Another text under the same name would fail on a connection that prepared the first: the fixed timeline is in it.
  // So is another purge bound (tests): its acquisitions' cap is in their text; and so are the faults (tests).
  const prefix =
    preparedPrefix(options) +
    (settings.timeline === undefined ? '' : `_t${settings.timeline}`) +
    (purgeAfterMs === PURGE_AFTER_MS ? '' : `_p${purgeAfterMs}`) +
    (faults.tokenBeforeLock ? '_f' : '') +
    (faults.readerBesideWriter ? '_r' : '') +
    (faults.renewOneLength ? '_l' : '');
  // Behind a transaction pooler a prepared statement belongs to whichever server connection ran it, not to our
  // client: there every statement is unnamed.
  const named = (statement: string) => (options.pooler === 'transaction' ? {} : { name: `${prefix}_${statement}` });
  return { names: n, sql, privileges, named };
}
