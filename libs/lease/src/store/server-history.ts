/**
 * The store's reads of the server's history: at bootstrap, before any lease statement, which timeline the tokens
 * carry and where the server stands (bounded for a start, `bootstrapBoundMs`, not like a heartbeat); and, when a
 * renewal is refused as a write, whether the server is a standby in recovery.
 */
import { walFunctionsRefused } from '../errors/database-errors.js';
import type { ResolvedLeaseOptions } from '../interfaces/lease-module-options.interface.js';
import { bootstrapBoundMs } from '../options/bounds.js';
import type { ServerHistory } from './store.types.js';
import { runStatement, type SessionSource } from '../database/sessions.js';
import { serverHistory, type ServerHistoryRow } from './rows.js';
import type { RunStatement } from './schema-store.js';
import type { StatementTexts } from './statement-texts.js';

/**
 * Whether the role may call the WAL functions the timeline is read with (`TIMELINE`). Where it may not — EXECUTE
 * revoked from PUBLIC, or the server does not support them (Aurora) — every statement uses a fixed timeline instead,
 * the largest already in the tables (at least 1), so new tokens stay above every token there; the timeline guard is
 * then off (no failover is seen through the timeline). Resolves with that fixed timeline, or null when the server's
 * timeline is read as usual.
 */
export async function fixedTimeline(
  run: RunStatement,
  sql: StatementTexts,
  options: ResolvedLeaseOptions,
): Promise<bigint | null> {
  const boundMs = bootstrapBoundMs(options);
  const { rows } = await run<{ readable: boolean }>({ text: sql.walReadable, boundMs });
  if (rows[0].readable) {
    const refused = await run({ text: sql.walProbe, boundMs }).then(
      () => false,
      (error: unknown) => {
        if (walFunctionsRefused(error)) return true;
        throw error;
      },
    );
    if (!refused) return null;
  }
  const found = await run<{ timeline: string }>({ text: sql.tableTimeline, boundMs });
  return BigInt(found.rows[0].timeline);
}

/**
 * Where the server stands in its history (the system identifier the leases are acquired under), and whether the
 * role may read the system identifier at all.
 */
export async function readServerHistory(
  run: RunStatement,
  sql: StatementTexts,
  options: ResolvedLeaseOptions,
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
