import { type CanActivate, type ExecutionContext, type INestApplication, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { LeaseConfigError, LeaseConsoleModule, LeaseModule, LeaseService } from 'nest-pg-lease';
import { FAST, useTestDatabase } from '../support/db.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

// LeaseConsoleModule over HTTP: nothing is mounted without a guard unless the app says the reads are public, the
// actions are never mounted without a guard, a guard's "no" writes nothing, and a "yes" force-releases with the actor
// the app names.

/** The app's guard: one header token; the operator's name from another header. */
class TokenGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>();
    return request.headers['x-console-token'] === 'secret';
  }
}

describe('LeaseConsoleModule', () => {
  const db = useTestDatabase('console_http');
  let app: INestApplication | undefined;
  let base = '';

  afterAll(async () => {
    await app?.close();
  });

  test('actions without a guard → LeaseConfigError at bootstrap', () => {
    expect(() => LeaseConsoleModule.forRoot({ actions: true })).toThrow(LeaseConfigError);
    expect(() => LeaseConsoleModule.forRoot({ actions: true })).toThrow(/needs a guard/);
  });

  test('no guard → LeaseConfigError at bootstrap naming guard and public, unless public: true says so', () => {
    for (const options of [undefined, {}, { path: 'ops' }, { public: false }]) {
      const mount = () => LeaseConsoleModule.forRoot(options);
      expect(mount).toThrow(LeaseConfigError);
      expect(mount).toThrow(/forRoot\(\) needs a guard: .*personal data.*Pass guard: .*or public: true/);
    }
    // The reads, and the page at the root path (static: it holds no data).
    expect(LeaseConsoleModule.forRoot({ public: true }).controllers).toHaveLength(2);
    // public is for the reads: the actions always need a guard, and a guard with public is a contradiction.
    expect(() => LeaseConsoleModule.forRoot({ public: true, actions: true })).toThrow(
      /actions: true \}\) needs a guard/,
    );
    expect(() => LeaseConsoleModule.forRoot({ public: true, guard: new TokenGuard() })).toThrow(
      /guard and public: true contradict each other/,
    );
    const yes = () => LeaseConsoleModule.forRoot({ public: 'yes' as unknown as boolean });
    expect(yes).toThrow(LeaseConfigError);
    expect(yes).toThrow(/option public must be a boolean, got string/);
  });

  test('trustedOrigins that are not origins, or actions not a boolean → LeaseConfigError naming the option', () => {
    const guard = new TokenGuard();
    for (const trustedOrigins of [['admin.example.com'], ['https://admin.example.com/console'], 'https://a.example']) {
      const mount = () =>
        LeaseConsoleModule.forRoot({ guard, actions: true, trustedOrigins: trustedOrigins as string[] });
      expect(mount).toThrow(LeaseConfigError);
      expect(mount).toThrow(/option trustedOrigins must be a list of origins/);
    }
    const yes = () => LeaseConsoleModule.forRoot({ guard, actions: 'yes' as unknown as boolean });
    expect(yes).toThrow(LeaseConfigError);
    expect(yes).toThrow(/option actions must be a boolean, got string/);
  });

  test('public: true without actions: no write route exists (404) and the reads answer anyone', async () => {
    @Module({
      imports: [
        LeaseModule.forRoot(
          mergeLeaseOptions(FAST, {
            tables: { createSchema: true },
            connections: { dataSource: { type: 'postgres', url: db.url } },
          }),
        ),
        LeaseConsoleModule.forRoot({ public: true }),
      ],
    })
    class ReadOnlyApp {}
    const readOnly = await NestFactory.create(ReadOnlyApp, { logger: false });
    await readOnly.listen(0, '127.0.0.1');
    try {
      const url = await readOnly.getUrl();
      const post = await fetch(`${url}/lease-console/force-release`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ targetKey: 'k', by: 'x', reason: 'y' }),
      });
      expect(post.status).toBe(404);
      expect(await (await fetch(`${url}/lease-console/capabilities`)).json()).toEqual({ actions: false });
      expect((await fetch(`${url}/lease-console/leases`)).status).toBe(200);
    } finally {
      await readOnly.close();
    }
  });

  test('guard rejects → 403 and nothing written; accepts → force-release with the actor, audited', async () => {
    @Module({
      imports: [
        LeaseModule.forRoot(
          mergeLeaseOptions(FAST, {
            tables: { createSchema: true },
            connections: { dataSource: { type: 'postgres', url: db.url } },
          }),
        ),
        LeaseConsoleModule.forRoot({
          guard: new TokenGuard(),
          actions: true,
          actor: (request) => (request as { headers: Record<string, string> }).headers['x-operator'],
        }),
      ],
    })
    class ConsoleApp {}
    app = await NestFactory.create(ConsoleApp, { logger: false });
    await app.listen(0, '127.0.0.1');
    base = await app.getUrl();
    const leases = app.get(LeaseService);
    const lease = (await leases.tryAcquire('job:1'))!;

    const call = (path: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(`${base}/lease-console/${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      });
    const audited = async () => (await db.admin.query('SELECT count(*)::int AS n FROM job_lease_audit')).rows[0].n;

    const before = await audited();
    for (const path of ['force-release', 'drain', 'undrain']) {
      const refused = await call(path, { targetKey: 'job:1', subject: 'job:1', by: 'mallory', reason: 'x' });
      expect(refused.status).toBe(403);
    }
    expect((await fetch(`${base}/lease-console/history?key=job:1`)).status).toBe(403);
    expect(await audited()).toBe(before);
    expect(lease.signal.aborted).toBe(false);
    const { rows: drains } = await db.admin.query('SELECT * FROM job_lease_drain');
    expect(drains).toEqual([]);

    const bad = await call('force-release', { targetKey: 'job:1', reason: '' }, { 'x-console-token': 'secret' });
    expect(bad.status).toBe(400);
    expect(await audited()).toBe(before);

    const done = await call(
      'force-release',
      { targetKey: 'job:1', by: 'ignored', reason: 'stuck' },
      { 'x-console-token': 'secret', 'x-operator': 'alice' },
    );
    expect(done.status).toBe(200);
    expect(await done.json()).toMatchObject({ released: true, fencingToken: String(lease.fencingToken) });
    const { rows } = await db.admin.query('SELECT actor, reason FROM job_lease_audit ORDER BY id DESC LIMIT 1');
    expect(rows[0]).toEqual({ actor: 'alice', reason: 'stuck' });

    const drained = await call('drain', { subject: 'job:2', by: 'bob', reason: 'm' }, { 'x-console-token': 'secret' });
    expect(drained.status).toBe(200);
    await expect(leases.tryAcquire('job:2')).rejects.toMatchObject({ name: 'LeaseDrainedError' });
    const undrained = await call(
      'undrain',
      { subject: 'job:2', by: 'bob', reason: 'm' },
      { 'x-console-token': 'secret' },
    );
    expect(await undrained.json()).toEqual({ removed: true });
  });
});
