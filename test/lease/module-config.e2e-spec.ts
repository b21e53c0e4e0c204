import { type INestApplication, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { LeaseConfigError, LeaseModule, type LeaseModuleOptions } from 'nest-pg-lease';
import { FAST } from '../support/db.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

/** Configuration refused at bootstrap with a LeaseConfigError that says what to change, never a raw driver error. */
describe('LeaseModule configuration', () => {
  test('a DataSource that is not PostgreSQL → LeaseConfigError before TypeORM loads a driver', async () => {
    @Module({
      imports: [
        LeaseModule.forRoot(
          mergeLeaseOptions(FAST, {
            connections: {
              dataSource: { type: 'mysql', host: '127.0.0.1', port: 3306, username: 'x', password: 'x', database: 'x' },
            },
          }),
        ),
      ],
    })
    class MysqlApp {}
    const app = await NestFactory.create(MysqlApp, { logger: false, abortOnError: false });
    const error = await app.init().then(
      () => undefined,
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(LeaseConfigError);
    expect((error as Error).message).toMatch(/PostgreSQL DataSource \(type "postgres"\), got "mysql"/);
    await app.close().catch(() => undefined);
  });

  /** The bootstrap error of an application whose LeaseModule gets `options` from an async factory (ConfigService). */
  async function bootstrapError(options: unknown): Promise<unknown> {
    @Module({ imports: [LeaseModule.forRootAsync({ useFactory: () => options as LeaseModuleOptions })] })
    class App {}
    const app = await NestFactory.create(App, { logger: false, abortOnError: false }).catch(
      (caught: unknown) => caught,
    );
    if (!(app instanceof Object) || !('init' in app)) return app;
    const error = await (app as INestApplication).init().then(
      () => undefined,
      (caught: unknown) => caught,
    );
    await (app as INestApplication).close().catch(() => undefined);
    return error;
  }

  test.each<[string, unknown, string | RegExp]>([
    [
      'a flat option of the old shape',
      { heartbeatIntervalMs: 1_000 },
      'Unknown LeaseModule option "heartbeatIntervalMs": did you mean "timing.heartbeatIntervalMs"?',
    ],
    [
      'a typo in a group',
      { timing: { leaseTimoutMs: 1_000 } },
      'Unknown LeaseModule option "timing.leaseTimoutMs": did you mean "timing.leaseTimeoutMs"?',
    ],
    [
      'a field in the wrong group',
      { tables: { poolSize: 4 } },
      'Unknown LeaseModule option "tables.poolSize": did you mean "connections.poolSize"?',
    ],
    ['a group that is no object', { limits: 5 }, /LeaseModule option limits must be an object/],
    [
      'a bad value, named by its path',
      { timing: { heartbeatIntervalMs: '10s' } },
      /timing\.heartbeatIntervalMs must be/,
    ],
  ])('%s from forRootAsync → LeaseConfigError at bootstrap', async (_, options, message) => {
    const error = await bootstrapError(options);
    expect(error).toBeInstanceOf(LeaseConfigError);
    expect((error as Error).message).toMatch(message);
  });
});
