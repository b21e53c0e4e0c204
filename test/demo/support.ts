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

/**
 * The sum of the samples of `name` in Prometheus text format whose labels include `labels` (every series of the metric
 * when none are given), e.g. `sample(text, 'lease_lost_total', { reason: 'taken-over' })`. A metric with no series yet
 * (labelled series appear with their first label values) counts 0; an unknown name throws.
 */
export function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  if (!text.includes(`# TYPE ${name} `) && !new RegExp(`^${name}[ {]`, 'm').test(text)) {
    throw new Error(`No metric ${name} in:\n${text}`);
  }
  const wanted = Object.entries(labels).map(([key, value]) => `${key}="${value}"`);
  let sum = 0;
  for (const row of text.split('\n')) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(row);
    if (!match || match[1] !== name) continue;
    const has = new Set((match[2] ?? '').split(/,(?=[a-zA-Z_]\w*=")/).filter(Boolean));
    if (wanted.every((pair) => has.has(pair))) sum += Number(match[3]);
  }
  return sum;
}
