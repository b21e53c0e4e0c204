/**
 * A one-call real PostgreSQL for an application's tests (Jest, Vitest): the embedded server (or `DATABASE_URL`),
 * and a fresh database per test file.
 */
import {
  createDatabase,
  dropDatabase,
  type PostgresServer,
  startPostgres,
  type StartPostgresOptions,
} from './embedded-postgres.js';

/** A database of its own on the test server. */
export interface TestDatabase {
  /** Its connection URL. */
  readonly url: string;
  /** Drops it (ending its remaining sessions first). */
  drop(): Promise<void>;
}

/** The test server: `DATABASE_URL`'s, or an embedded one this process started. */
export interface TestPostgres {
  /** Connection URL of the maintenance database. */
  readonly url: string;
  /** True when this process started the server (embedded). */
  readonly embedded: boolean;
  /** Creates a fresh database (its name starts with `prefix`). */
  createDatabase(prefix?: string): Promise<TestDatabase>;
  /** Stops an embedded server and deletes its data (the databases with it); a `DATABASE_URL` server is left alone. */
  stop(): Promise<void>;
}

/**
 * Starts PostgreSQL for tests: the server of `DATABASE_URL` when set, else a throwaway embedded one on a free port
 * (needs the `embedded-postgres` package as a dev dependency; about a second or two to start).
 */
export async function startTestPostgres(options: StartPostgresOptions = {}): Promise<TestPostgres> {
  const server: PostgresServer = await startPostgres(options);
  return {
    url: server.url,
    embedded: server.embedded,
    async createDatabase(prefix = 'test') {
      const url = await createDatabase(server.url, prefix);
      return { url, drop: () => dropDatabase(server.url, url) };
    },
    stop: () => server.destroy(),
  };
}

/** The test runner's hooks (Jest's and Vitest's globals). */
type Hook = (fn: () => Promise<void>, timeoutMs?: number) => void;

/**
 * Registers `beforeAll` / `afterAll` hooks of the test file (Jest, or Vitest with `globals`): a server started and a
 * fresh database created before its tests, dropped and stopped after them. Read `url` from `beforeAll` on.
 */
export function useLeaseDatabase(prefix = 'test'): { readonly url: string } {
  const hooks = globalThis as { beforeAll?: Hook; afterAll?: Hook };
  if (typeof hooks.beforeAll !== 'function' || typeof hooks.afterAll !== 'function') {
    throw new TypeError(
      "useLeaseDatabase() needs the test runner's global beforeAll/afterAll (Jest; Vitest with globals)",
    );
  }
  let server: TestPostgres | undefined;
  let database: TestDatabase | undefined;
  hooks.beforeAll(async () => {
    server = await startTestPostgres();
    database = await server.createDatabase(prefix);
  }, 120_000);
  hooks.afterAll(async () => {
    await database?.drop();
    await server?.stop();
  }, 60_000);
  return {
    get url() {
      if (!database) throw new Error('useLeaseDatabase: the database exists from beforeAll on');
      return database.url;
    },
  };
}
