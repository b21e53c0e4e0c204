// The tools of `npm run test:consumer` (run.mjs): child processes, the README's code blocks, the matrix's Node.js
// binaries. None of them knows the matrix's rows.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, realpathSync } from 'node:fs';
import { join, relative } from 'node:path';

export const repo = execFileSync('git', ['rev-parse', '--show-toplevel'], { encoding: 'utf8' }).trim();
export const log = (message) => console.log(`[consumer] ${message}`);

/**
 * The Node.js releases of the matrix. This machine's own `node` serves its major; another major runs the binary of
 * the registry's `node-<platform>-<arch>` package at this version, installed once into .cache/node-<major>
 * (git-ignored). Every npm install runs on this machine's node and npm: the app's `node` is the matrix axis.
 */
export const NODE_RELEASES = { 20: '20.20.2', 22: '22.23.5', 24: '24.22.3' };

/**
 * Runs a command without holding up the rows that run beside it: its exit status, stdout and stderr (npm writes its
 * warnings there).
 */
export function capture(command, args, cwd) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk) => (stderr += chunk));
    child.on('error', (error) => resolve({ status: null, stdout, stderr: `${stderr}${error.message}` }));
    child.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

/** Same as capture; throws with the output when the command fails. */
export async function runSplit(command, args, cwd) {
  const result = await capture(command, args, cwd);
  if (result.status !== 0)
    throw new Error(`${command} ${args.join(' ')} failed (${result.status}):\n${result.stdout}${result.stderr}`);
  return result;
}

/** Runs a command, returns its output; throws with the output when it fails. */
export const run = async (command, args, cwd) => (await runSplit(command, args, cwd)).stdout;

/** The lines of npm's output that are warnings or errors. */
export const npmNoise = (result) =>
  `${result.stdout}\n${result.stderr}`.split('\n').filter((line) => /warn|EBADENGINE|ERR/i.test(line));

/** The README's fenced code blocks of one section, with their language and the `###` subsection they are in. */
export function readmeBlocks(section) {
  const readme = readFileSync(join(repo, 'README.md'), 'utf8');
  const start = readme.indexOf(`\n## ${section}\n`);
  if (start < 0) throw new Error(`README has no "## ${section}" section`);
  const end = readme.indexOf('\n## ', start + 1);
  const text = readme.slice(start, end < 0 ? undefined : end);
  return [...text.matchAll(/```(\w+)\n([\s\S]*?)```/g)].map((match) => {
    const headings = [...text.slice(0, match.index).matchAll(/\n### (.+)\n/g)];
    return { lang: match[1], body: match[2], subsection: headings.at(-1)?.[1] };
  });
}

/** A block whose first line is `// path` is the file at that path. */
export function fileOf(block) {
  const first = /^\/\/ ([\w./-]+)\n/.exec(block.body);
  return first ? first[1] : undefined;
}

/** The `npm install` commands of some README blocks, the package's name replaced by the tarball. */
export function installCommands(blocks, tarball) {
  return blocks
    .filter((block) => block.lang === 'bash')
    .flatMap((block) => block.body.split('\n'))
    .filter((line) => line.startsWith('npm install'))
    .map((line) => ({
      line,
      args: line
        .split(/\s+/)
        .slice(1)
        .map((arg) => (arg === 'nest-pg-lease' ? tarball : arg)),
    }));
}

/** Every file under a directory, relative to it. */
export function filesUnder(dir) {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(dir, join(entry.parentPath, entry.name)));
}

/** The `node` binary of a Node.js major (see NODE_RELEASES). */
export async function nodeBinary(major) {
  if (Number(process.versions.node.split('.')[0]) === major) return process.execPath;
  const release = NODE_RELEASES[major];
  if (!release) throw new Error(`NODE_RELEASES has no Node ${major}`);
  const name = `node-${process.platform}-${process.arch}`;
  const prefix = join(repo, '.cache', `node-${major}`);
  const manifest = join(prefix, 'node_modules', name, 'package.json');
  const installed = existsSync(manifest) ? JSON.parse(readFileSync(manifest, 'utf8')).version : undefined;
  if (installed !== release) {
    log(`npm install --prefix .cache/node-${major} ${name}@${release} …`);
    await run(
      'npm',
      ['install', '--prefix', prefix, '--no-save', '--no-audit', '--no-fund', '--loglevel=error', `${name}@${release}`],
      repo,
    );
  }
  return join(prefix, 'node_modules', name, 'bin', 'node');
}

/** npm's own script, to run npm under another Node.js (`<node> <npm-cli.js> …`). */
export function npmCli() {
  const fromRun = process.env.npm_execpath;
  if (fromRun && /npm-cli\.js$/.test(fromRun)) return fromRun;
  return realpathSync(execFileSync('which', ['npm'], { encoding: 'utf8' }).trim());
}
