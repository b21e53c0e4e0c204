/**
 * A database of its own for each test file, on a PostgreSQL the application's tests provide (a server of theirs, a
 * CI service container, one testcontainers starts): the kit starts no server.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { LeaseConfigError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';

/** The test runner's hooks (Jest's and Vitest's globals). */
type Hook = (fn: () => Promise<void>, timeoutMs?: number) => void;

/** Runs `work` on a client of the server's maintenance database. */
async function onServer(serverUrl: string, work: (client: pg.Client) => Promise<unknown>): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await work(client);
  } finally {
    await client.end();
  }
}

/**
 * Registers `beforeAll` / `afterAll` hooks of the test file (Jest, or Vitest with `globals`): a fresh database
 * (its name starts with `prefix`) created on the server at `serverUrl` — `DATABASE_URL` by default, read when the
 * hooks run — before the file's tests, dropped after them (its remaining sessions ended). Read `url` from
 * `beforeAll` on.
 */
export function useLeaseDatabase({ serverUrl, prefix = 'test' }: { serverUrl?: string; prefix?: string } = {}): {
  readonly url: string;
} {
  const hooks = globalThis as { beforeAll?: Hook; afterAll?: Hook };
  if (typeof hooks.beforeAll !== 'function' || typeof hooks.afterAll !== 'function') {
    throw new LeaseConfigError(messages.noTestRunnerHooks('useLeaseDatabase()'));
  }
  let server: string | undefined;
  let url: URL | undefined;
  hooks.beforeAll(async () => {
    server = serverUrl ?? process.env.DATABASE_URL;
    if (!server) {
      throw new LeaseConfigError(messages.noTestServer('useLeaseDatabase()'));
    }
    const name = `${prefix}_${randomBytes(6).toString('hex')}`;
    await onServer(server, (client) => client.query(`CREATE DATABASE "${name.replace(/"/g, '""')}"`));
    url = new URL(server);
    url.pathname = `/${name}`;
  }, 60_000);
  hooks.afterAll(async () => {
    if (!server || !url) return;
    const name = decodeURIComponent(url.pathname.slice(1)).replace(/"/g, '""');
    await onServer(server, (client) => client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`));
  }, 60_000);
  return {
    get url() {
      if (!url) throw new Error('useLeaseDatabase: the database exists from beforeAll on');
      return url.toString();
    },
  };
}
