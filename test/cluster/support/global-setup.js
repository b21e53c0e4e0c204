// Plain JS: Jest loads global setup outside its module mapper. A fresh summary for this run of the cluster suite;
// each scenario starts its own Patroni cluster, so there is no shared server here.
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

export const SUMMARY_DIR = join(process.cwd(), 'artifacts', 'cluster');

export default async function globalSetup() {
  rmSync(SUMMARY_DIR, { recursive: true, force: true });
  mkdirSync(SUMMARY_DIR, { recursive: true });
  process.env.CLUSTER_STARTED_AT = String(Date.now());
}
