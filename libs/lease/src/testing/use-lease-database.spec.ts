import { LeaseConfigError } from '../errors/lease.errors.js';
import { useLeaseDatabase } from './use-lease-database.js';

type Hook = () => Promise<void>;

/** Calls `register` with the runner's hooks captured (not registered), and returns them. */
function captured(register: () => { readonly url: string }) {
  const globals = globalThis as Record<string, unknown>;
  const saved = { beforeAll: globals.beforeAll, afterAll: globals.afterAll };
  const hooks: { before?: Hook; after?: Hook } = {};
  globals.beforeAll = (fn: Hook) => (hooks.before = fn);
  globals.afterAll = (fn: Hook) => (hooks.after = fn);
  try {
    return { database: register(), ...hooks };
  } finally {
    Object.assign(globals, saved);
  }
}

describe('useLeaseDatabase (the kit starts no server: it makes a database on one the tests provide)', () => {
  const saved = process.env.DATABASE_URL;
  afterEach(() => {
    if (saved === undefined) delete process.env.DATABASE_URL;
    else process.env.DATABASE_URL = saved;
  });

  test('without DATABASE_URL or serverUrl, its beforeAll says how to provide a server', async () => {
    delete process.env.DATABASE_URL;
    const { database, before, after } = captured(() => useLeaseDatabase());
    await expect(before!()).rejects.toThrow(LeaseConfigError);
    await expect(before!()).rejects.toThrow(/set DATABASE_URL .* or pass \{ serverUrl \}/);
    await expect(after!()).resolves.toBeUndefined(); // nothing was made, nothing to drop
    expect(() => database.url).toThrow(/exists from beforeAll on/);
  });

  test('outside a test runner (no global beforeAll / afterAll), a LeaseConfigError at once', () => {
    const globals = globalThis as Record<string, unknown>;
    const saved = { beforeAll: globals.beforeAll, afterAll: globals.afterAll };
    globals.beforeAll = undefined;
    try {
      expect(() => useLeaseDatabase({ serverUrl: 'postgres://localhost/postgres' })).toThrow(LeaseConfigError);
    } finally {
      Object.assign(globals, saved);
    }
  });
});
