/**
 * The checker specs' database: for each test, a fresh database with the fault suite's tables (and counter rows for
 * `keys`) and the schedule's instrumentation, dropped after it; `as(app)` opens a connection that looks like one of
 * a worker's (its `application_name`), as the instrumentation tells them apart.
 */
import pg from 'pg';
import { prepareTables } from '../faults/support/harness.js';
import { createTestDatabase } from '../support/db.js';
import { installInstrumentation } from './instrumentation.js';

export function useCheckerDatabase(name: string, keys: string[]): { as(app: string): Promise<pg.Client> } {
  let db: { url: string; drop: () => Promise<void> };
  const sessions: pg.Client[] = [];

  async function as(app: string): Promise<pg.Client> {
    const client = new pg.Client({ connectionString: db.url, application_name: app });
    await client.connect();
    sessions.push(client);
    return client;
  }

  beforeEach(async () => {
    db = await createTestDatabase(name);
    await prepareTables(db.url, keys);
    await installInstrumentation(await as('fault-harness'));
  });

  afterEach(async () => {
    await Promise.all(sessions.splice(0).map((client) => client.end()));
    await db.drop();
  });

  return { as };
}
