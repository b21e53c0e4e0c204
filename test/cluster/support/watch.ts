/**
 * The suite's own eyes on the nodes, on direct connections (never through HAProxy or a gate): when the old leader
 * stops taking writes, and which candidate comes out of recovery, when, and what lease rows it has at that moment.
 */
import pg from 'pg';
import type { SurvivingRow } from '../../failover/support/checker.js';
import type { PatroniCluster, PatroniNode } from './patroni.js';

const POLL_MS = 25;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A probe that gives up after `ms` (a node that does not answer is no answer). */
function within<T>(ms: number, work: Promise<T>): Promise<T> {
  return Promise.race([
    work,
    new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms).unref()),
  ]);
}

async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, application_name: 'cluster-watch' });
  client.on('error', () => undefined);
  await within(2_000, client.connect());
  return client;
}

export interface Promotion {
  node: PatroniNode;
  /** When the suite saw it out of recovery. */
  at: number;
  timeline: number;
  /** Its lease rows at that moment (no client can reach it yet: its gate is closed). */
  rows: SurvivingRow[];
}

/** Polls every candidate every 25 ms; resolves with the first one out of recovery (within `timeoutMs`). */
export function watchPromotion(
  cluster: PatroniCluster,
  candidates: PatroniNode[],
  database: string,
  timeoutMs = 60_000,
): { done: Promise<Promotion> } {
  let found: Promotion | undefined;
  const until = performance.now() + timeoutMs;
  const watch = async (node: PatroniNode): Promise<Promotion | undefined> => {
    let client: pg.Client | undefined;
    while (!found && performance.now() < until) {
      try {
        client ??= await connect(cluster.urlOf(node, database));
        const {
          rows: [state],
        } = await within(2_000, client.query<{ recovery: boolean }>('SELECT pg_is_in_recovery() AS recovery'));
        if (!state.recovery) {
          const at = performance.now();
          const {
            rows: [{ timeline }],
          } = await client.query<{ timeline: number }>(
            `SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int AS timeline`,
          );
          type Row = { target_id: string; lease_token: string | null; fencing_token: string; blocks_ms: number };
          const { rows } = await client.query<Row>(
            // A released row (no lease token) blocks nothing: the load uses no holdAtLeastMs.
            `SELECT target_id, lease_token::text, fencing_token::text,
               CASE WHEN lease_token IS NULL THEN 0 ELSE greatest(0, extract(epoch FROM updated_at
                 + lease_timeout_ms * interval '1 millisecond' - clock_timestamp()) * 1000) END::float8 AS blocks_ms
             FROM job_lease WHERE slot >= 0`,
          );
          await client.end().catch(() => undefined);
          return {
            node,
            at,
            timeline,
            rows: rows.map((row) => ({
              targetKey: row.target_id,
              leaseToken: row.lease_token,
              fencingToken: BigInt(row.fencing_token),
              blocksForMs: row.blocks_ms,
            })),
          };
        }
      } catch {
        // Restarting, refusing connections: try again.
        await client?.end().catch(() => undefined);
        client = undefined;
      }
      await sleep(POLL_MS);
    }
    await client?.end().catch(() => undefined);
    return undefined;
  };
  const done = new Promise<Promotion>((resolve, reject) => {
    let pending = candidates.length;
    for (const node of candidates) {
      void watch(node).then((promotion) => {
        if (promotion && !found) {
          found = promotion;
          resolve(promotion);
        } else if (--pending === 0 && !found) {
          reject(new Error(`no candidate (${candidates.map((n) => n.name).join(', ')}) promoted in ${timeoutMs} ms`));
        }
      });
    }
  });
  return { done };
}

/** Polls the old leader every 25 ms until it stops taking writes; resolves with the last moment it still did. */
export function watchOldLeader(cluster: PatroniCluster, old: PatroniNode): { lastWritableAt: Promise<number> } {
  const lastWritableAt = (async () => {
    let last = performance.now();
    const client = await connect(cluster.urlOf(old)).catch(() => undefined);
    if (!client) return last;
    try {
      for (;;) {
        const {
          rows: [state],
        } = await within(1_000, client.query<{ recovery: boolean }>('SELECT pg_is_in_recovery() AS recovery'));
        if (state.recovery) return last;
        last = performance.now();
        await sleep(POLL_MS);
      }
    } catch {
      return last;
    } finally {
      await client.end().catch(() => undefined);
    }
  })();
  return { lastWritableAt };
}

/**
 * When HAProxy sends new connections to `node` (the application's switch): a connection through HAProxy every 50 ms
 * until the server that answers is `node`; resolves with when the first such connection was opened.
 */
export async function watchRouting(cluster: PatroniCluster, node: PatroniNode, timeoutMs = 60_000): Promise<number> {
  const until = performance.now() + timeoutMs;
  while (performance.now() < until) {
    const opened = performance.now();
    const port = await (async () => {
      const client = await connect(cluster.url('postgres'));
      try {
        const { rows } = await within(2_000, client.query<{ port: number }>('SELECT inet_server_port() AS port'));
        return rows[0].port;
      } finally {
        await client.end().catch(() => undefined);
      }
    })().catch(() => undefined);
    if (port === node.pgPort) return opened;
    await sleep(2 * POLL_MS);
  }
  throw new Error(`HAProxy did not route to ${node.name} within ${timeoutMs} ms`);
}
