/**
 * A blue/green pair by logical replication, as RDS Blue/Green, a major-version upgrade or a move to another service
 * does it: separate database clusters (each its own initdb: its own system identifier, timeline 1, sequences at their
 * start), from the embedded PostgreSQL binaries, `wal_level = logical`. The caller makes the same tables on every
 * server, then publishes some of blue's and subscribes each green to them (`publish`, `subscribe`); the switchover
 * helpers stop writes on blue, wait until every subscription has caught up (LSNs compared) and end the replication.
 * Logical replication copies rows, never sequence values (PostgreSQL 10–18).
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, createWriteStream, mkdirSync, mkdtempSync, rmSync, type WriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { embeddedBinaries, freePort, initCluster, removeWhenGone } from '@app/pg-harness';
import pg from 'pg';
import { PgNode } from './cluster.js';

export const DATABASE = 'bluegreen';
const PUBLICATION = 'lease_tables';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export interface BlueGreen {
  blue: PgNode;
  /** The green servers, by name. */
  greens: Record<string, PgNode>;
  /** URL of `database` on `node`. */
  urlOf(node: PgNode, database?: string): string;
  destroy(): Promise<void>;
}

export interface BlueGreenOptions {
  /** Names of the green servers (one subscription each). */
  greens: string[];
  /** Where the server logs go. */
  logDir: string;
  /** Called on each server's database once it exists (the lease tables, the application's tables). */
  prepare: (url: string) => Promise<void>;
}

/** Runs `text` on `url` in a connection of its own. */
export async function query<R extends pg.QueryResultRow>(url: string, text: string, values: unknown[] = []) {
  const client = new pg.Client({ connectionString: url, application_name: 'bluegreen-suite' });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return (await client.query<R>(text, values)).rows;
  } finally {
    await client.end();
  }
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const until = performance.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (performance.now() > until) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** Starts blue and the greens (initdb each), each with `database` prepared. */
export async function startBlueGreen(options: BlueGreenOptions): Promise<BlueGreen> {
  const cleanup: string[] = [];
  const nodes: PgNode[] = [];
  const guards: Array<{ kill(): boolean }> = [];
  const logs: WriteStream[] = [];
  const destroy = async () => {
    for (const node of nodes) await node.stop().catch(() => undefined);
    for (const guard of guards) guard.kill();
    for (const log of logs) log.end();
    for (const path of cleanup) rmSync(path, { recursive: true, force: true });
  };
  try {
    const binaries = await embeddedBinaries(cleanup);
    const password = randomBytes(12).toString('hex');
    mkdirSync(options.logDir, { recursive: true });
    const urlOf = (node: PgNode, database = DATABASE) =>
      `postgres://postgres:${password}@127.0.0.1:${node.port}/${database}`;
    const start = async (name: string) => {
      const parent = mkdtempSync(join(tmpdir(), 'nest-pg-lease-bluegreen-'));
      cleanup.unshift(parent);
      chmodSync(parent, 0o755);
      const dataDir = join(parent, 'data');
      mkdirSync(dataDir, { mode: 0o700 });
      if (binaries.user) chownSync(dataDir, binaries.user.uid, binaries.user.gid);
      initCluster(binaries, dataDir, password);
      const log = createWriteStream(join(options.logDir, `${name}.log`));
      logs.push(log);
      const node = new PgNode(
        name,
        binaries,
        dataDir,
        await freePort(),
        {
          listen_addresses: '127.0.0.1',
          unix_socket_directories: '',
          max_connections: 100,
          wal_level: 'logical',
          max_replication_slots: 8,
          max_wal_senders: 8,
          // The subscriber reports its position every second (default 10 s): "caught up" is seen soon.
          wal_receiver_status_interval: 1,
        },
        log,
      );
      nodes.push(node);
      await node.start();
      guards.push(removeWhenGone([parent], node.pid));
      await query(urlOf(node, 'postgres'), `CREATE DATABASE ${DATABASE}`);
      await options.prepare(urlOf(node));
      return node;
    };
    const blue = await start('blue');
    const greens: Record<string, PgNode> = {};
    for (const name of options.greens) greens[name] = await start(`green-${name}`);
    return { blue, greens, urlOf, destroy };
  } catch (error) {
    await destroy();
    throw error;
  }
}

/** Publishes `tables` of blue. */
export async function publish(pair: BlueGreen, tables: string[]): Promise<void> {
  await query(pair.urlOf(pair.blue), `CREATE PUBLICATION ${PUBLICATION} FOR TABLE ${tables.join(', ')}`);
}

/** The subscription (and its slot on blue) of green `name`. */
export const subscriptionOf = (name: string) => `green_${name.replace(/\W/g, '_')}`;

/** Subscribes green `name` to blue's publication and waits until the initial copy of every table is done. */
export async function subscribe(pair: BlueGreen, name: string): Promise<void> {
  const green = pair.greens[name];
  const blueUrl = new URL(pair.urlOf(pair.blue));
  const connection = `host=127.0.0.1 port=${pair.blue.port} dbname=${DATABASE} user=postgres password=${decodeURIComponent(blueUrl.password)}`;
  const subscription = subscriptionOf(name);
  await query(
    pair.urlOf(green),
    `CREATE SUBSCRIPTION ${subscription} CONNECTION '${connection}' PUBLICATION ${PUBLICATION}`,
  );
  await waitFor(`${subscription}: the initial copy`, async () => {
    const rows = await query<{ ready: boolean }>(
      pair.urlOf(green),
      `SELECT count(*) > 0 AND bool_and(r.srsubstate = 'r') AS ready FROM pg_subscription_rel r
       JOIN pg_subscription s ON s.oid = r.srsubid WHERE s.subname = $1`,
      [subscription],
    );
    return rows[0]?.ready ? true : undefined;
  });
}

/**
 * The switchover's first steps: blue accepts no more writes (`default_transaction_read_only`, as a blue/green
 * switchover makes the old primary read-only), then every subscription has confirmed blue's WAL up to where it
 * stood (LSNs compared on blue's replication slots), then the subscriptions are disabled (nothing of blue's may reach
 * a green once the application writes there). Returns blue's LSN at the stop.
 */
export async function stopBlueAndCatchUp(pair: BlueGreen): Promise<string> {
  const blueAdmin = pair.urlOf(pair.blue, 'postgres');
  await query(blueAdmin, `ALTER SYSTEM SET default_transaction_read_only = on`);
  await query(blueAdmin, `SELECT pg_reload_conf()`);
  await waitFor('blue read-only', async () => {
    const rows = await query<{ ro: string }>(
      pair.urlOf(pair.blue),
      `SELECT current_setting('default_transaction_read_only') AS ro`,
    );
    return rows[0]?.ro === 'on' ? true : undefined;
  });
  const [{ lsn }] = await query<{ lsn: string }>(blueAdmin, `SELECT pg_current_wal_lsn()::text AS lsn`);
  const slots = Object.keys(pair.greens).map(subscriptionOf);
  await waitFor('every subscription caught up with blue', async () => {
    const rows = await query<{ behind: number }>(
      blueAdmin,
      `SELECT count(*)::int AS behind FROM pg_replication_slots
       WHERE slot_name = ANY($1) AND (confirmed_flush_lsn IS NULL OR confirmed_flush_lsn < $2::pg_lsn)`,
      [slots, lsn],
    );
    return rows[0]?.behind === 0 ? true : undefined;
  });
  for (const [name, green] of Object.entries(pair.greens)) {
    await query(pair.urlOf(green), `ALTER SUBSCRIPTION ${subscriptionOf(name)} DISABLE`);
  }
  return lsn;
}
