import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { LeaseConfigError, LeaseModule } from 'nest-pg-lease';
import { FAST } from '../support/db.js';

/** Configuration refused at bootstrap with a LeaseConfigError that says what to change, never a raw driver error. */
describe('LeaseModule configuration', () => {
  test('a DataSource that is not PostgreSQL → LeaseConfigError before TypeORM loads a driver', async () => {
    @Module({
      imports: [
        LeaseModule.forRoot({
          ...FAST,
          dataSource: { type: 'mysql', host: '127.0.0.1', port: 3306, username: 'x', password: 'x', database: 'x' },
        }),
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
});
