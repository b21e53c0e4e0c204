/**
 * The bounds of every statement and connection of the library, derived from the options in one place (the page
 * docs/bounds.md is this file in words). Every bound holds on the client and on the server: the server ends a
 * statement at its bound (statement_timeout, lock_timeout), and the client gives up a little later (`slackMs`).
 */
import type { EngineSettings } from './engine-settings.js';
import { ONE_SECOND_MS } from './limits.js';

type Timings = Pick<EngineSettings, 'heartbeatIntervalMs' | 'leaseTimeoutMs' | 'safetyMarginMs' | 'waiterTimeoutMs'>;

/**
 * An acquisition: a grant later than this would be past its local deadline on arrival (the lease counts from when
 * its statement was sent). Also what a statement waiting for a locked row (a fenced transaction still finishing) may
 * wait.
 */
export function acquireBoundMs(o: Timings): number {
  return o.leaseTimeoutMs - o.safetyMarginMs;
}

/**
 * The least a release, a dequeue or a read is given, however short the heartbeat interval: room for a loaded server.
 * Measured (`bench/release-at-load.ts`, docs/bounds.md): on 2 cores at load average 7 with three CPU hogs beside, a
 * release took 4–21 ms at the median, 110–132 ms at p99.9 and 252 ms at worst (2,000 per row) — where one heartbeat
 * interval of the tests (100 ms; 300 ms behind the pooler) was its whole bound. Four times the worst.
 */
export const SHORT_BOUND_FLOOR_MS = 1_000;

/**
 * A release, a dequeue, a read: one heartbeat interval, and at least `SHORT_BOUND_FLOOR_MS` — never more than an
 * acquisition's bound (the statement pool's session bound: the server still ends each statement no later than the
 * client gives it up, and none needs framing). Local safety does not depend on it: a release is sent once its lease
 * is given up locally (its signal aborted first), and no lease's deadline waits for any of these statements (each
 * lease's deadline timer counts from its last confirmed renewal alone); a longer bound only delays when a failing
 * release is retried, and a failing read is reported. A release that times out is retried.
 */
export function shortBoundMs(o: Timings): number {
  return Math.max(o.heartbeatIntervalMs, Math.min(SHORT_BOUND_FLOOR_MS, acquireBoundMs(o)));
}

/**
 * The session bound of the statement pool (see `StatementPool`): an acquisition's, so the server always ends an
 * acquisition before its client gives up. A statement given longer (an enqueue when `waiterTimeoutMs` is the larger)
 * frames its own bound.
 */
export function statementPoolBoundMs(o: Timings): number {
  return acquireBoundMs(o);
}

/**
 * The bootstrap checks' reads (which objects exist, which rights the role has): a start may meet a slow server or
 * link (cold caches, a busy machine), and failing it costs a restart, so they get an acquisition's bound, not a
 * heartbeat interval.
 */
export function bootstrapBoundMs(o: Timings): number {
  return statementPoolBoundMs(o);
}

/**
 * Getting a connection for a statement (connecting, or waiting for a free one in the statement pool): no longer than
 * an acquisition may take, and at most 10 s — but never less than a heartbeat interval.
 */
export function connectBoundMs(o: Timings): number {
  return Math.max(o.heartbeatIntervalMs, Math.min(acquireBoundMs(o), 10_000));
}

/** How much later than the server the client gives a statement up: time for the server's answer to arrive. */
export function slackMs(o: Timings): number {
  return Math.min(ONE_SECOND_MS, Math.ceil(o.heartbeatIntervalMs / 2));
}

/**
 * A batch of acquisitions never waits for a lock one caller's key is under (another process's uncommitted insert of
 * a new key, say): past this, the batch is given up on the server and its callers go alone, each waiting only for its
 * own key.
 */
export const BATCH_LOCK_WAIT_MS = 10;

/**
 * Each step of `close()`: statements in flight, releases, the connections. A release's bound and the client's slack:
 * the releases of the step land, or give up, within it.
 */
export function closeStepMs(o: Timings): number {
  return shortBoundMs(o) + slackMs(o);
}

/** Closing one connection: a polite end, then its socket is destroyed. */
export function connectionCloseMs(o: Timings): number {
  return Math.min(ONE_SECOND_MS, o.heartbeatIntervalMs);
}

/**
 * The purge (see `LeaseStore.purge`): a key's row is deleted once it is free (released or expired, past its hold) and
 * its current token was granted longer ago than this. One hour: a key used again within the hour keeps its row.
 */
export const PURGE_AFTER_MS = 3_600_000;

/**
 * An acquisition statement that has run longer than this fails on the server, after its writes and before its
 * commit, whatever the process's options: half the purge bound, so a token drawn before a key's row existed is never
 * inserted after a purge deleted a later grant's row (the argument: docs/purging.md).
 */
export function acquireRunCapMs(purgeAfterMs: number): number {
  return Math.floor(purgeAfterMs / 2);
}

/** Rows one purge statement deletes at most (each statement a short transaction). */
export const PURGE_BATCH_ROWS = 1_000;

/** How often a process runs the purge (and once at bootstrap), ± a tenth at random so processes spread out. */
export const PURGE_INTERVAL_MS = 600_000;

/** How often each process re-reads the drains in force while it attempts acquisitions (docs/console.md): a drain
 * made in another process takes effect here within this, plus one statement. The process that drains applies it at
 * once; a process that attempted nothing for this long reads them before its next attempt. */
export const DRAIN_REFRESH_MS = 1_000;

/** The journal's batching (see `journal`): a flush every interval, at most this many rows buffered, per statement. */
export const JOURNAL_FLUSH_MS = 250;
export const JOURNAL_BUFFER_ROWS = 1_000;
export const JOURNAL_BATCH_ROWS = 500;
/** Journal rows older than this are trimmed, every `JOURNAL_TRIM_INTERVAL_MS`, at most a batch per run. */
export const JOURNAL_RETENTION_MS = 86_400_000;
export const JOURNAL_TRIM_INTERVAL_MS = 60_000;
