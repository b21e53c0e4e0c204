import { createDatabase, dropDatabase } from '@app/pg-harness';
import type { LeaseModuleOptions } from 'nest-pg-lease';
import pg from 'pg';
import type { DataSource } from 'typeorm';
import {
  type DataSourceShape,
  makeDataSource as makeOwnDataSource,
  openService,
  type OpenedService,
} from './lease-service.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

export type { OpenedService } from './lease-service.js';

/** A DataSource with the lease entities whose connections are named `lease-test` unless told otherwise. */
export function makeDataSource(url: string, shape: DataSourceShape = {}): DataSource {
  return makeOwnDataSource(url, { applicationName: 'lease-test', ...shape });
}

/** The server started by the Jest global setup (or DATABASE_URL). */
export function serverUrl(): string {
  const url = process.env.LEASE_TEST_SERVER_URL ?? process.env.DATABASE_URL;
  if (!url) throw new Error('No PostgreSQL: run the tests through `npm test` (global setup starts one)');
  return url;
}

/** Server defaults of `default_transaction_isolation` to run suites under (ShedLock runs its suite serializable). */
export const ISOLATIONS = ['read committed', 'serializable'] as const;
export type Isolation = (typeof ISOLATIONS)[number];

/**
 * A database of its own for one test file, so files can run in parallel. `isolation` sets the database's default
 * transaction isolation (for every session opened afterwards): the library must not depend on the server default.
 */
export async function createTestDatabase(
  prefix = 'test',
  isolation: Isolation = 'read committed',
): Promise<{ url: string; drop: () => Promise<void> }> {
  const server = serverUrl();
  const url = await createDatabase(server, prefix);
  if (isolation !== 'read committed') {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const name = decodeURIComponent(new URL(url).pathname.slice(1));
      const database = `"${name.replace(/"/g, '""')}"`;
      await client.query(`ALTER DATABASE ${database} SET default_transaction_isolation = '${isolation}'`);
    } finally {
      await client.end();
    }
  }
  return { url, drop: () => dropDatabase(server, url) };
}

/**
 * Test options: short intervals, generous ratios, and a short shutdown grace (a test that closes a service with a
 * handle still held waits no more than that; the drain's own tests set theirs).
 */
export const FAST: LeaseModuleOptions = {
  timing: {
    heartbeatIntervalMs: 100,
    leaseTimeoutMs: 1_000,
    waiterTimeoutMs: 600,
    waitPollIntervalMs: 200,
    shutdownGraceMs: 200,
  },
};

/**
 * The one way the suites open a LeaseService (a "process" of its own as far as the database can tell): `openService`
 * with the test timings (`FAST`) and `createSchema`; `applicationName` names its pooled connections.
 */
export function openLeaseService(
  url: string,
  options: LeaseModuleOptions = {},
  { applicationName = 'lease-test', poolSize = 10 }: { applicationName?: string; poolSize?: number } = {},
): Promise<OpenedService> {
  return openService(url, mergeLeaseOptions({ tables: { createSchema: true } }, FAST, options), {
    applicationName,
    poolSize,
  });
}

/** `openLeaseService` with the default pool. */
export function startService(url: string, options: LeaseModuleOptions = {}, applicationName = 'lease-test') {
  return openLeaseService(url, options, { applicationName });
}

/** A test database with its admin client, from `useTestDatabase`. */
export interface TestDatabase {
  readonly url: string;
  readonly admin: pg.Client;
  /** `startService` on this database, closed by the helper before the database is dropped. */
  open(options?: LeaseModuleOptions, applicationName?: string): Promise<OpenedService>;
  /**
   * Runs `cleanup` after the tests, before the opened services are closed and the database dropped (`WITH (FORCE)`:
   * a pool or process still connected then would see its connections killed). Latest registered runs first.
   */
  beforeDrop(cleanup: () => unknown): void;
}

/**
 * The hooks of a test file (or describe block) that needs a database of its own: created before its tests with an
 * admin client (and `setup` run through it), dropped after them — once every service opened through `open()` is
 * closed, so the file's own hooks need no particular order.
 */
export function useTestDatabase(
  prefix: string,
  isolation: Isolation = 'read committed',
  setup?: (admin: pg.Client, url: string) => Promise<unknown>,
): TestDatabase {
  let created: { url: string; drop: () => Promise<void> } | undefined;
  let client: pg.Client | undefined;
  const opened: OpenedService[] = [];
  const cleanups: (() => unknown)[] = [];
  beforeAll(async () => {
    created = await createTestDatabase(prefix, isolation);
    client = await adminClient(created.url);
    await setup?.(client, created.url);
  });
  afterAll(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
    await Promise.all(opened.splice(0).map((service) => service.close()));
    await client?.end();
    await created?.drop();
  });
  const database: TestDatabase = {
    get url() {
      if (!created) throw new Error('useTestDatabase: the database exists from beforeAll on');
      return created.url;
    },
    get admin() {
      if (!client) throw new Error('useTestDatabase: the admin client exists from beforeAll on');
      return client;
    },
    async open(options = {}, applicationName?: string) {
      const service = await startService(database.url, options, applicationName);
      opened.push(service);
      return service;
    },
    beforeDrop(cleanup) {
      cleanups.push(cleanup);
    },
  };
  return database;
}

/** A plain client for inspecting and poking the database from the test. */
export async function adminClient(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  return client;
}

/** Resolves when `predicate` holds, polling every `everyMs`; rejects after `timeoutMs` with `what`. */
export async function eventually<T>(
  probe: () => Promise<T> | T,
  predicate: (value: T) => boolean,
  what: string,
  timeoutMs = 10_000,
  everyMs = 20,
): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (predicate(value)) return value;
    if (Date.now() > until)
      throw new Error(`Timed out after ${timeoutMs} ms waiting for: ${what} (last: ${String(value)})`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}
