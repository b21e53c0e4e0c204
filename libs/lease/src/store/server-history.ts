/**
 * The store's reads of the server's history: at bootstrap, before any lease statement, which timeline the tokens
 * carry, the sequences raised above the tables where they stand behind, and where the server stands (bounded for a
 * start, `bootstrapBoundMs`, not like a heartbeat); and, when a renewal is refused as a write, whether the server is a
 * standby in recovery.
 */
import { walFunctionsRefused } from '../errors/database-errors.js';
import type { EngineSettings } from '../options/engine-settings.js';
import { bootstrapBoundMs } from '../options/bounds.js';
import type { ServerHistory } from './store.types.js';
import { runStatement, type SessionSource } from '../database/sessions.js';
import { serverHistory, type ServerHistoryRow } from './rows.js';
import type { RunStatement } from './schema-store.js';
import type { StatementTexts } from './statement-texts.js';
import { timelineOf } from './sql/fencing-token.js';

/** A lease sequence that stood at or below the values of its kind in the tables (see `settleTokens`). */
export interface SequenceRaise {
  kind: 'fencing' | 'waiter';
  /** The sequence's quoted name. */
  sequence: string;
  /** Its last value before (null: never drawn). */
  stood: bigint | null;
  /** The largest value of its kind in the tables (the 47 bits below the timeline). */
  above: bigint;
  /** Its last value now; null: not raised (the role lacks UPDATE on it). */
  raisedTo: bigint | null;
}

/** Where new fencing tokens stand (see `settleTokens`). */
export interface TokenStanding {
  /** The fixed timeline every statement uses instead of the server's; null: the server's timeline. */
  fixed: bigint | null;
  /**
   * Why the timeline is fixed: `wal`, the WAL functions are not executable; `tables`, the tables hold tokens of a
   * later timeline than the server's (copied or restored from a server with a longer history).
   */
  reason?: 'wal' | 'tables';
  /** The server's own timeline (null: in recovery, or not readable). */
  serverTimeline: bigint | null;
  /** The sequences that stood behind the tables. */
  raises: SequenceRaise[];
}

/**
 * Where new fencing tokens stand on this server, settled before the first grant (at bootstrap, and again when a
 * renewal finds another system identifier): the timeline they carry, and sequences above every value in the tables.
 * One scan of both tables (`tableTopsSql`).
 *
 * - The timeline. Where the role may not call the WAL functions the timeline is read with (`TIMELINE`) — EXECUTE
 *   revoked from PUBLIC, or the server does not support them (Aurora) — every statement uses a fixed timeline
 *   instead: the largest already in the tables (at least 1), so new tokens stay above every token there; the timeline
 *   guard is then off (no failover is seen through the timeline). The same where the tables hold tokens of a later
 *   timeline than the server's own (a new cluster whose tables were copied from a server that had failed over):
 *   tokens on the server's timeline would all be below them.
 * - The sequences (`raiseSequencesSql`): where one stands at or below the largest value of its kind in the tables on
 *   that timeline (a new cluster: logical replication and most copies carry rows, not sequence values), it is
 *   raised above it; a role without UPDATE on it raises nothing, and the caller says what to run.
 */
export async function settleTokens(
  run: RunStatement,
  sql: StatementTexts,
  options: EngineSettings,
): Promise<TokenStanding> {
  const boundMs = bootstrapBoundMs(options);
  const serverTimeline = await walTimeline(run, sql, boundMs);
  const tops = (await run<{ token: string | null; seq: string | null }>({ text: sql.tableTops, boundMs })).rows[0];
  const token = tops.token === null ? null : BigInt(tops.token);
  const seq = tops.seq === null ? null : BigInt(tops.seq);
  const tablesTimeline = [token, seq].reduce<bigint>(
    (largest, value) => (value !== null && timelineOf(value) > largest ? timelineOf(value) : largest),
    1n,
  );
  let fixed: bigint | null = null;
  let reason: TokenStanding['reason'];
  if (serverTimeline === 'refused') [fixed, reason] = [tablesTimeline, 'wal'];
  else if (serverTimeline !== null && tablesTimeline > serverTimeline) [fixed, reason] = [tablesTimeline, 'tables'];
  const timeline = fixed ?? (serverTimeline === 'refused' ? null : serverTimeline);
  const raises =
    timeline === null
      ? []
      : (
          await run<{
            kind: SequenceRaise['kind'];
            name: string;
            stood: string | null;
            above: string;
            raised_to: string | null;
          }>({
            text: sql.raiseSequences,
            boundMs,
            values: [timeline.toString(), tops.token, tops.seq],
          })
        ).rows.map((row) => ({
          kind: row.kind,
          sequence: row.name,
          stood: row.stood === null ? null : BigInt(row.stood),
          above: BigInt(row.above),
          raisedTo: row.raised_to === null ? null : BigInt(row.raised_to),
        }));
  return {
    fixed,
    ...(reason ? { reason } : {}),
    serverTimeline: serverTimeline === 'refused' ? null : serverTimeline,
    raises,
  };
}

/**
 * The server's timeline through the WAL functions (null: in recovery), or `refused`: the role may not call them, or
 * the server refuses them although it may (Aurora).
 */
async function walTimeline(
  run: RunStatement,
  sql: StatementTexts,
  boundMs: number,
): Promise<bigint | null | 'refused'> {
  const { rows } = await run<{ readable: boolean }>({ text: sql.walReadable, boundMs });
  if (!rows[0].readable) return 'refused';
  return run<{ timeline: string | null }>({ text: sql.walProbe, boundMs }).then(
    ({ rows: [probe] }) => (probe.timeline === null ? null : BigInt(probe.timeline)),
    (error: unknown) => {
      if (walFunctionsRefused(error)) return 'refused' as const;
      throw error;
    },
  );
}

/**
 * Where the server stands in its history (the system identifier the leases are acquired under), and whether the
 * role may read the system identifier at all.
 */
export async function readServerHistory(
  run: RunStatement,
  sql: StatementTexts,
  options: EngineSettings,
): Promise<{ history: ServerHistory; systemIdReadable: boolean }> {
  const boundMs = bootstrapBoundMs(options);
  const { rows } = await run<{ readable: boolean }>({ text: sql.systemIdReadable, boundMs });
  const systemIdReadable = rows[0].readable;
  const result = await run<ServerHistoryRow>({
    text: systemIdReadable ? sql.serverHistory : sql.serverHistoryWithoutSystemId,
    boundMs,
  });
  return { history: serverHistory(result.rows[0]), systemIdReadable };
}

/** Where the server stands, read on `session` within `timeoutMs` (a renewal refused as a write: in recovery?). */
export async function readHistoryOn(
  session: SessionSource,
  sql: StatementTexts,
  systemIdReadable: boolean,
  timeoutMs: number,
): Promise<ServerHistory> {
  const { rows } = await runStatement<ServerHistoryRow>(session, {
    boundMs: timeoutMs,
    customPlans: true,
    text: systemIdReadable ? sql.serverHistory : sql.serverHistoryWithoutSystemId,
  });
  return serverHistory(rows[0]);
}
