/** How one demo instance is set up; read from the environment by `main.ts` (the tour and serve scripts set it). */
export interface DemoConfig {
  /** Short name shown on the dashboard and in the tour's timeline ("A", "B"). */
  instance: string;
  host: string;
  port: number;
  databaseUrl: string;
  /** Base URL of the fake scoring API. */
  scoringUrl: string;
  heartbeatIntervalMs: number;
  leaseTimeoutMs: number;
  /** Every instance's base URL by name, so the dashboard can show and act on all of them. */
  peers: Record<string, string>;
}

export const DEMO_CONFIG = Symbol('DEMO_CONFIG');

function integer(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value <= 0) throw new Error(`${name} must be a positive integer, got "${raw}"`);
  return value;
}

/** `DEMO_PEERS=A=http://127.0.0.1:3001,B=http://127.0.0.1:3002` */
function parsePeers(raw: string | undefined): Record<string, string> {
  const peers: Record<string, string> = {};
  for (const entry of (raw ?? '').split(',').filter(Boolean)) {
    const at = entry.indexOf('=');
    if (at <= 0) throw new Error(`DEMO_PEERS entries look like NAME=URL, got "${entry}"`);
    peers[entry.slice(0, at)] = entry.slice(at + 1);
  }
  return peers;
}

export function configFromEnv(env: NodeJS.ProcessEnv = process.env): DemoConfig {
  const databaseUrl = env.DATABASE_URL;
  if (!databaseUrl) throw new Error('DATABASE_URL is required (npm run demo:serve starts a PostgreSQL and sets it)');
  const instance = env.DEMO_INSTANCE || 'A';
  const host = env.HOST || '127.0.0.1';
  const port = integer(env, 'PORT', 3001);
  const peers = parsePeers(env.DEMO_PEERS);
  peers[instance] ??= `http://${host}:${port}`;
  return {
    instance,
    host,
    port,
    databaseUrl,
    scoringUrl: env.SCORING_URL || 'http://127.0.0.1:3003',
    heartbeatIntervalMs: integer(env, 'HEARTBEAT_INTERVAL_MS', 500),
    leaseTimeoutMs: integer(env, 'LEASE_TIMEOUT_MS', 3_000),
    peers,
  };
}
