// One row of the consumer matrix (`run.mjs`): a built app started with the `node` of one Node.js major on a fresh
// database, proven over HTTP, stopped with SIGTERM. Rows run side by side: each has its own database, port and checks;
// what it starts is kept in `live` until it stops, so the runner can end it after a failure.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createDatabase, freePort } from '@app/pg-harness';
import pg from 'pg';

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

/**
 * Proves the built app of `dir` with `node` on a database made on `serverUrl`. `check(ok, message)` records the row's
 * checks, `log` prints with the row's label; `live` holds the databases and child processes started.
 */
export async function proveApp({ dir, node, serverUrl, check, log, live }) {
  const databaseUrl = await createDatabase(serverUrl, 'consumer');
  live.databases.push(databaseUrl);
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  let output = '';
  const child = spawn(node, ['dist/main.js'], {
    cwd: dir,
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      PORT: String(port),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.children.add(child);
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

  // Two concurrent requests for one user: one holds the lease through the example's 2 s of work, the other is refused
  // meanwhile; then the holder saves, fenced.
  const sentAt = performance.now();
  const first = request(`${base}/reports/7`, { method: 'POST' });
  const second = request(`${base}/reports/7`, { method: 'POST' });
  const refused = await Promise.race([first, second]);
  const refusedAfterMs = performance.now() - sentAt;
  log(
    `one answer while the other runs: ${refused.status} Retry-After: ${refused.retryAfter} ${JSON.stringify(refused.body)}`,
  );
  check(refused.status === 409, 'the duplicate request is refused with 409');
  check(Number(refused.retryAfter) >= 1, 'the 409 carries Retry-After');
  check(refused.body?.targetKey === 'report:7', 'the 409 body names the target report:7');
  const [a, b] = await Promise.all([first, second]);
  const ranForMs = performance.now() - sentAt;
  log(`the 409 came after ${refusedAfterMs.toFixed(0)} ms, the run's answer after ${ranForMs.toFixed(0)} ms`);
  check(ranForMs >= 2_000, `the running request took the example's 2 s of work (${ranForMs.toFixed(0)} ms)`);
  const saved = a === refused ? b : a;
  log(`the other answer: ${saved.status} ${JSON.stringify(saved.body)}`);
  check(saved.status === 201, 'the running request answers 201');

  const db = new pg.Client({ connectionString: databaseUrl });
  await db.connect();
  try {
    const results = (await db.query('SELECT user_id, builds, fencing_token::text AS fencing_token FROM report')).rows;
    const leases = (await db.query('SELECT count(*)::int AS n FROM job_lease WHERE lease_token IS NOT NULL')).rows[0].n;
    const last = (await db.query('SELECT last_value::text AS v FROM job_lease_fencing_seq')).rows[0].v;
    log(`report: ${JSON.stringify(results)}; job_lease rows: ${leases}; fencing sequence at ${last}`);
    check(
      results.length === 1 && results[0].user_id === 7 && results[0].builds === 1,
      'one fenced save is in report (builds: 1: the refused request never ran)',
    );
    // The token the service saw inside the fence: the server's timeline in the high bits, a value of the lease's
    // sequence in the low 40 (docs/failover.md, Fencing token layout).
    const savedToken = BigInt(results[0]?.fencing_token ?? 0);
    check(
      results[0]?.fencing_token === saved.body?.fencingToken &&
        savedToken >> 47n === 1n &&
        BigInt(last) >= (savedToken & ((1n << 47n) - 1n)),
      'the row carries the fencing token of the lease that saved it',
    );
    check(leases === 0, 'the lease was released');

    const again = await request(`${base}/reports/7`, { method: 'POST' });
    log(`after the release: ${again.status} ${JSON.stringify(again.body)}`);
    check(
      again.status === 201 &&
        again.body.builds === 2 &&
        BigInt(again.body.fencingToken) > BigInt(saved.body.fencingToken),
      'the next run gets the lease with a larger fencing token and saves builds: 2',
    );
    const other = await request(`${base}/reports/8`, { method: 'POST' });
    check(other.status === 201, `another user's report runs independently: ${other.status}`);
  } finally {
    await db.end();
  }

  // Shutdown hooks: SIGTERM ends the app cleanly.
  child.kill('SIGTERM');
  const [code, signal] = await Promise.race([
    exited,
    new Promise((_, reject) =>
      setTimeout(() => reject(new Error(`the app did not exit on SIGTERM:\n${output}`)), 30_000),
    ),
  ]);
  check(code === 0 || signal === 'SIGTERM', `the app exits on SIGTERM (code ${code}, signal ${signal})`);
  live.children.delete(child);
  if (/error/i.test(output)) console.log(output);
  check(!/\bERROR\b/.test(output), 'the app logged no errors');
}
