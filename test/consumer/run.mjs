// `npm run test:consumer`: nest-pg-lease as a new user gets it. Packs libs/lease, installs the tarball into a fresh
// NestJS 12 ESM app in a temporary directory (real packages from the registry, with the README's install commands
// and its Node 20 override), writes the app from the README's Usage code blocks (so the README is what is tested),
// compiles it with plain `tsc` under `strict` without `skipLibCheck`, starts it with `node` on a real PostgreSQL and
// proves it over HTTP: a duplicate request refused with 409 + Retry-After by a decorated provider method called from
// an undecorated controller, and a fenced save in the database with its fencing token.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createDatabase, dropDatabase, freePort, startPostgres } from '@app/pg-harness';
import pg from 'pg';

const repo = execFileSync('git', ['rev-parse', '--show-toplevel'], { encoding: 'utf8' }).trim();
const log = (message) => console.log(`[consumer] ${message}`);
const failures = [];
const check = (ok, message) => {
  if (ok) log(`ok   ${message}`);
  else {
    failures.push(message);
    console.error(`[consumer] FAIL ${message}`);
  }
};

/** Runs a command, returns its combined output; throws with the output when it fails. */
function run(command, args, cwd, env = process.env) {
  try {
    return execFileSync(command, args, {
      cwd,
      env,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      maxBuffer: 64 << 20,
    });
  } catch (error) {
    throw new Error(`${command} ${args.join(' ')} failed:\n${error.stdout ?? ''}${error.stderr ?? ''}`, {
      cause: error,
    });
  }
}

/** Same, keeping stderr apart (npm writes its warnings there). */
function runSplit(command, args, cwd) {
  const child = spawnSyncCapture(command, args, cwd);
  if (child.status !== 0)
    throw new Error(`${command} ${args.join(' ')} failed (${child.status}):\n${child.stdout}${child.stderr}`);
  return child;
}

function spawnSyncCapture(command, args, cwd) {
  return spawnSync(command, args, { cwd, encoding: 'utf8', maxBuffer: 64 << 20 });
}

/** The README's fenced code blocks of one section, with their language. */
function readmeBlocks(section) {
  const readme = readFileSync(join(repo, 'README.md'), 'utf8');
  const start = readme.indexOf(`\n## ${section}\n`);
  if (start < 0) throw new Error(`README has no "## ${section}" section`);
  const end = readme.indexOf('\n## ', start + 1);
  const text = readme.slice(start, end < 0 ? undefined : end);
  return [...text.matchAll(/```(\w+)\n([\s\S]*?)```/g)].map(([, lang, body]) => ({ lang, body }));
}

/** A block whose first line is `// path` is the file at that path. */
function fileOf(block) {
  const first = /^\/\/ ([\w./-]+)\n/.exec(block.body);
  return first ? first[1] : undefined;
}

async function request(url, init) {
  const response = await fetch(url, init);
  const text = await response.text();
  let body = text;
  try {
    body = JSON.parse(text);
  } catch {
    // plain text
  }
  return { status: response.status, retryAfter: response.headers.get('retry-after'), body };
}

const work = mkdtempSync(join(tmpdir(), 'nest-pg-lease-consumer-'));
const app = join(work, 'app');
let server;
let databaseUrl;
let child;
let scoring;
try {
  // 1. The tarball, exactly as `npm publish` would make it (prepack builds a clean dist).
  log(`npm pack libs/lease (prepack builds dist) …`);
  const packed = JSON.parse(
    run('npm', ['pack', '--json', '--pack-destination', work, '--loglevel=error'], join(repo, 'libs/lease')),
  )[0];
  const tarball = join(work, packed.filename);
  const files = packed.files.map((file) => file.path).sort();
  log(
    `${packed.filename}: ${packed.entryCount} files, ${(packed.size / 1024).toFixed(1)} kB packed, ` +
      `${(packed.unpackedSize / 1024).toFixed(1)} kB unpacked`,
  );
  for (const file of packed.files) console.log(`  ${String(file.size).padStart(7)}  ${file.path}`);
  for (const build of ['esm', 'cjs']) {
    check(
      files.includes(`dist/${build}/index.js`) && files.includes(`dist/${build}/index.d.ts`),
      `tarball has dist/${build}/index.js and its .d.ts`,
    );
  }
  check(files.includes('README.md') && files.includes('LICENSE'), 'tarball has README.md and LICENSE');
  check(!files.some((file) => file.startsWith('src/')), 'tarball has no src/');
  check(!files.some((file) => /\.spec\./.test(file)), 'tarball has no spec files');
  check(!files.some((file) => /tsconfig/.test(file)), 'tarball has no tsconfig');
  check(!files.some((file) => file.endsWith('.ts') && !file.endsWith('.d.ts')), 'tarball has no TypeScript sources');

  // 2. A fresh app: package.json with the README's Node 20 override, then the README's install commands.
  mkdirSync(app);
  const install = readmeBlocks('Install');
  const override = install.find((block) => block.lang === 'json' && block.body.includes('"overrides"'));
  if (!override) throw new Error('README Install shows no "overrides" block');
  const manifest = { name: 'consumer-app', private: true, type: 'module', ...JSON.parse(`{${override.body}}`) };
  writeFileSync(join(app, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  const commands = install
    .filter((block) => block.lang === 'bash')
    .flatMap((block) => block.body.split('\n'))
    .filter((line) => line.startsWith('npm install'));
  if (commands.length === 0) throw new Error('README Install shows no npm install command');
  for (const command of commands) {
    const args = command
      .split(/\s+/)
      .slice(1)
      .map((arg) => (arg === 'nest-pg-lease' ? tarball : arg));
    log(`${command.replace('nest-pg-lease', packed.filename)}`);
    const result = runSplit('npm', [...args, '--no-audit', '--no-fund'], app);
    const noise = `${result.stdout}\n${result.stderr}`.split('\n').filter((line) => /warn|EBADENGINE|ERR/i.test(line));
    for (const line of noise) console.log(`  ${line}`);
    check(
      !noise.some((line) => /EBADENGINE/.test(line)),
      `install is free of EBADENGINE on Node ${process.versions.node}`,
    );
    check(noise.length === 0, `install is quiet (no npm warnings): ${command.split(' ').slice(0, 3).join(' ')} …`);
  }
  const installed = JSON.parse(run('npm', ['ls', '--json', '--depth=0'], app)).dependencies;
  log(
    `installed: ${Object.entries(installed)
      .map(([name, info]) => `${name}@${info.version}`)
      .join(', ')}`,
  );
  const fileType = JSON.parse(run('npm', ['ls', 'file-type', '--json'], app));
  log(
    `file-type resolved: ${JSON.stringify(fileType.dependencies ?? {}).match(/"file-type":\{"version":"([^"]+)"/)?.[1]}`,
  );

  // 3. The README's Usage (and its tsconfig), file by file.
  const blocks = [...install, ...readmeBlocks('Usage')].filter((block) => fileOf(block));
  for (const block of blocks) {
    const path = join(app, fileOf(block));
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, block.body);
  }
  log(`wrote from the README: ${blocks.map(fileOf).join(', ')}`);
  const tsconfig = readFileSync(join(app, 'tsconfig.json'), 'utf8');
  check(/"strict": true/.test(tsconfig) && !/skipLibCheck/.test(tsconfig), 'tsconfig is strict, without skipLibCheck');
  check(blocks.map(fileOf).includes('src/main.ts'), 'the README gives src/main.ts');

  // 4. Plain tsc, every .d.ts checked.
  log('npx tsc -p tsconfig.json …');
  const tsc = spawnSyncCapture('npx', ['--no-install', 'tsc', '-p', 'tsconfig.json'], app);
  if (tsc.stdout.trim())
    console.log(
      tsc.stdout
        .trim()
        .split('\n')
        .map((line) => `  ${line}`)
        .join('\n'),
    );
  check(tsc.status === 0, `tsc (strict, no skipLibCheck) compiles the app: exit ${tsc.status}`);
  if (tsc.status !== 0) throw new Error('the app does not compile');

  // 5. PostgreSQL (DATABASE_URL or embedded), a fake slow scoring API, and the app started with plain node.
  server = await startPostgres();
  databaseUrl = await createDatabase(server.url, 'consumer');
  let releaseScore;
  const scoreGate = new Promise((resolve) => (releaseScore = resolve));
  const scoringCalls = [];
  scoring = createServer(async (req, res) => {
    scoringCalls.push(req.url);
    await scoreGate;
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ score: 0.75 }));
  });
  scoring.listen(0, '127.0.0.1');
  await once(scoring, 'listening');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  let output = '';
  child = spawn(process.execPath, ['dist/main.js'], {
    cwd: app,
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      PORT: String(port),
      SCORING_API: `http://127.0.0.1:${scoring.address().port}`,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const exited = once(child, 'exit');
  for (let started = Date.now(); ;) {
    if (child.exitCode !== null) throw new Error(`the app exited (${child.exitCode}):\n${output}`);
    const up = await fetch(`${base}/`).then(
      () => true,
      () => false,
    );
    if (up) break;
    if (Date.now() - started > 60_000) throw new Error(`the app did not listen within 60 s:\n${output}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  log(`node dist/main.js is listening on ${base}`);

  // 6. Two concurrent requests for one user: one holds the lease (its scoring call waits at our gate), the other is
  //    refused; then the gate opens and the holder saves, fenced.
  const first = request(`${base}/reports/7`, { method: 'POST' });
  const second = request(`${base}/reports/7`, { method: 'POST' });
  const refused = await Promise.race([first, second]);
  log(
    `one answer while the other runs: ${refused.status} Retry-After: ${refused.retryAfter} ${JSON.stringify(refused.body)}`,
  );
  check(refused.status === 409, 'the duplicate request is refused with 409');
  check(Number(refused.retryAfter) >= 1, 'the 409 carries Retry-After');
  check(refused.body?.targetKey === 'report:7', 'the 409 body names the target report:7');
  // The holder's call reaches the gate soon after (both acquisitions may have gone in one batch, answered together):
  // wait for it, then make sure no second call followed.
  for (let waited = 0; scoringCalls.length === 0 && waited < 10_000; waited += 20) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  await new Promise((resolve) => setTimeout(resolve, 200));
  check(scoringCalls.length === 1, `the scoring API was called once (${scoringCalls.length})`);
  releaseScore();
  const [a, b] = await Promise.all([first, second]);
  const saved = a === refused ? b : a;
  log(`the other answer: ${saved.status} ${JSON.stringify(saved.body)}`);
  check(saved.status === 201, 'the running request answers 201');

  const db = new pg.Client({ connectionString: databaseUrl });
  await db.connect();
  const rows = (await db.query('SELECT user_id, score, fencing_token::text AS fencing_token FROM job_result')).rows;
  const leases = (await db.query('SELECT count(*)::int AS n FROM job_lease WHERE lease_token IS NOT NULL')).rows[0].n;
  const last = (await db.query('SELECT last_value::text AS v FROM job_lease_fencing_seq')).rows[0].v;
  log(`job_result: ${JSON.stringify(rows)}; job_lease rows: ${leases}; fencing sequence at ${last}`);
  check(rows.length === 1 && rows[0].user_id === 7 && rows[0].score === 0.75, 'the fenced save is in job_result');
  // The token the service saw inside the fence: the server's timeline in the high bits, a value of the lease's
  // sequence in the low 40 (README, Failover).
  const savedToken = BigInt(rows[0]?.fencing_token ?? 0);
  check(
    rows[0]?.fencing_token === saved.body?.fencingToken &&
      savedToken >> 40n === 1n &&
      BigInt(last) >= (savedToken & ((1n << 40n) - 1n)),
    'the row carries the fencing token of the lease that saved it',
  );
  check(leases === 0, 'the lease was released');

  const again = await request(`${base}/reports/7`, { method: 'POST' });
  log(`after the release: ${again.status} ${JSON.stringify(again.body)}`);
  check(
    again.status === 201 && BigInt(again.body.fencingToken) > BigInt(saved.body.fencingToken),
    'the next run gets the lease with a larger fencing token',
  );
  const other = await request(`${base}/reports/8`, { method: 'POST' });
  check(other.status === 201, `another user's report runs independently: ${other.status}`);
  await db.end();

  // 7. Shutdown hooks: SIGTERM ends the app cleanly.
  child.kill('SIGTERM');
  const [code, signal] = await Promise.race([
    exited,
    new Promise((_, reject) =>
      setTimeout(() => reject(new Error(`the app did not exit on SIGTERM:\n${output}`)), 30_000),
    ),
  ]);
  check(code === 0 || signal === 'SIGTERM', `the app exits on SIGTERM (code ${code}, signal ${signal})`);
  child = undefined;
  if (/error/i.test(output)) console.log(output);
  check(!/\bERROR\b/.test(output), 'the app logged no errors');
} catch (error) {
  failures.push(String(error?.message ?? error));
  console.error(`[consumer] FAIL ${error?.stack ?? error}`);
} finally {
  child?.kill('SIGKILL');
  scoring?.close();
  scoring?.closeAllConnections();
  if (server && databaseUrl) await dropDatabase(server.url, databaseUrl).catch(() => undefined);
  await server?.destroy();
  rmSync(work, { recursive: true, force: true });
}
if (failures.length > 0) {
  console.error(`[consumer] ${failures.length} failure(s)`);
  process.exit(1);
}
log('all checks passed');
