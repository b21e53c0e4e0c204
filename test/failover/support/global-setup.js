// Plain JS: Jest loads global setup outside its module mapper. A fresh summary for this run of the failover suite;
// each scenario starts its own primary and standby, so there is no shared server here.
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

export const SUMMARY_DIR = join(process.cwd(), 'artifacts', 'failover');

export default async function globalSetup() {
  rmSync(SUMMARY_DIR, { recursive: true, force: true });
  mkdirSync(SUMMARY_DIR, { recursive: true });
  process.env.FAILOVER_STARTED_AT = String(Date.now());
}
