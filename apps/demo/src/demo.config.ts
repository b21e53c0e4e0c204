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
  /** What the operator's console guard expects in `x-console-token` (`CONSOLE_TOKEN`; a demo default otherwise). */
  consoleToken: string;
  /** Stand for the `demo:leader` role (leader.role.ts): `DEMO_LEADER`, `on` unless `off`. */
  leader: boolean;
}

export const DEMO_CONFIG = Symbol('DEMO_CONFIG');

/**
 * When the scheduled digest runs: `DIGEST_CRON` (six fields, seconds first; default every 5 s), or `off`. Read when
 * the module is loaded, because `@Cron` takes its expression at decoration time.
 */
export const DIGEST_SCHEDULE = digestSchedule(process.env.DIGEST_CRON);

function digestSchedule(raw: string | undefined): { cron: string; disabled: boolean; label: string } {
  const every5s = '*/5 * * * * *';
  if (raw === 'off') return { cron: every5s, disabled: true, label: 'off' };
  return { cron: raw || every5s, disabled: false, label: raw || every5s };
}

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
    consoleToken: env.CONSOLE_TOKEN || 'demo-operator-token',
    leader: env.DEMO_LEADER !== 'off',
  };
}
