import { startPostgres, type PostgresServer } from '@app/pg-harness';

declare global {
  var __LEASE_TEST_PG__: PostgresServer | undefined;
}

/** One PostgreSQL for the whole run; each test file makes its own database on it (see `test/support/db.ts`). */
export default async function globalSetup(): Promise<void> {
  const server = await startPostgres();
  globalThis.__LEASE_TEST_PG__ = server;
  process.env.LEASE_TEST_SERVER_URL = server.url;
}
