// Plain JS: Jest loads global setup outside its module mapper. Same as test/support/global-setup.ts (one PostgreSQL
// per run, DATABASE_URL when set), plus a fresh summary table and the suite's start time.
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { startPostgres } from '@app/pg-harness';

export const SUMMARY_DIR = join(process.cwd(), 'artifacts', 'faults');

export default async function globalSetup() {
  mkdirSync(SUMMARY_DIR, { recursive: true });
  rmSync(join(SUMMARY_DIR, 'summary.jsonl'), { force: true });
  process.env.LEASE_FAULTS_STARTED_AT = String(Date.now());
  const server = await startPostgres();
  globalThis.__LEASE_FAULTS_PG__ = server;
  process.env.LEASE_TEST_SERVER_URL = server.url;
}
