/**
 * `npm run demo:serve`: PostgreSQL (DATABASE_URL, or an embedded one), the fake scoring API and instances A and B,
 * kept running until Ctrl-C. Prints the dashboard URLs. Ports: DEMO_PORT (3001) for A, +1 for B, +2 for the API. The
 * scheduled digest runs every 5 s on both instances (DIGEST_CRON to change it, `off` to stop it).
 */
import { createDatabase, dropDatabase, startPostgres } from '@app/pg-harness';
import { startStack } from './stack.js';

const base = Number(process.env.DEMO_PORT || 3001);
const server = await startPostgres();
const databaseUrl = await createDatabase(server.url, 'demo');
let stack: Awaited<ReturnType<typeof startStack>> | undefined;

async function shutdown(code: number): Promise<never> {
  await stack?.stop();
  await dropDatabase(server.url, databaseUrl).catch(() => undefined);
  await server.destroy();
  process.exit(code);
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void shutdown(0));

try {
  stack = await startStack({
    databaseUrl,
    ports: { A: base, B: base + 1, scoring: base + 2 },
    scoringLatencyMs: Number(process.env.SCORING_LATENCY_MS || 8_000),
    scoringFailureRate: Number(process.env.SCORING_FAILURE_RATE || 0),
    echo: true,
    watch: process.env.DEMO_WATCH === '1',
    digestCron: process.env.DIGEST_CRON || '*/5 * * * * *',
    leader: process.env.DEMO_LEADER !== 'off',
  });
} catch (error) {
  console.error(String(error));
  await shutdown(1);
}
console.log(`
  nest-pg-lease demo is running (PostgreSQL: ${server.embedded ? 'embedded' : 'DATABASE_URL'}, lease timeout ${stack!.options.leaseTimeoutMs} ms)
    dashboard, instance A:  ${stack!.urls.A}/
    dashboard, instance B:  ${stack!.urls.B}/
    scoring API:            ${stack!.scoringUrl}/stats
  Ctrl-C stops everything.
`);
