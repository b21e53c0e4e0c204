import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash } from 'node:crypto';

const root = process.cwd();

function newestSource(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSource(path));
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.spec.ts'))
      newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

const mtime = (path: string) => (existsSync(path) ? statSync(path).mtimeMs : 0);

function stale(): boolean {
  return (
    newestSource(join(root, 'libs/lease/src')) > mtime(join(root, 'libs/lease/dist/esm/index.js')) ||
    newestSource(join(root, 'apps')) > mtime(join(root, 'dist/apps/demo/src/main.js'))
  );
}

/**
 * The demo's tests run the compiled demo in child processes, as users do. Builds (`npm run build`) when a source is
 * newer than its output; test files running in parallel take turns through a lock directory.
 */
export async function ensureDemoBuilt(): Promise<void> {
  const lock = join(tmpdir(), `nest-pg-lease-demo-build-${createHash('sha1').update(root).digest('hex').slice(0, 8)}`);
  const until = Date.now() + 180_000;
  for (;;) {
    try {
      mkdirSync(lock);
      break;
    } catch {
      // A build of another test file is under way (or one died: its lock is old).
      if (existsSync(lock) && Date.now() - mtime(lock) > 180_000) rmSync(lock, { recursive: true, force: true });
      if (Date.now() > until) throw new Error(`Waited 180 s for the demo build lock ${lock}`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
  try {
    if (stale()) execFileSync('npm', ['run', 'build'], { cwd: root, stdio: 'pipe' });
  } catch (error) {
    const output = error as { stdout?: Buffer; stderr?: Buffer };
    throw new Error(`npm run build failed:\n${output.stdout?.toString() ?? ''}${output.stderr?.toString() ?? ''}`, {
      cause: error,
    });
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/** The value of one sample in Prometheus text format, e.g. `sample(text, 'lease_lost_total', { reason: 'taken-over' })`. */
export function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  const wanted = Object.entries(labels)
    .map(([key, value]) => `${key}="${value}"`)
    .join(',');
  const series = wanted ? `${name}{${wanted}}` : name;
  const line = text.split('\n').find((row) => row.startsWith(`${series} `));
  if (!line) throw new Error(`No sample ${series} in:\n${text}`);
  return Number(line.slice(series.length + 1));
}
