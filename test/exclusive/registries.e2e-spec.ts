/**
 * Which application's LeaseService a decorated method runs under (issue 21 item 8): with two Nest applications in one
 * process (e2e tests: "another app instance"), an instance made by an application's injector always uses that
 * application's service — singletons, transient and request-scoped providers, in either start order; a second
 * `LeaseModule` in one application is refused at bootstrap with advice.
 */
import { Inject, Injectable, Module, Scope, type INestApplicationContext, type Type } from '@nestjs/common';
import { ContextIdFactory, NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Exclusive, LeaseConfigError, LeaseModule, LeaseService, leaseEntities } from 'nest-pg-lease';
import { FAST, useTestDatabase } from '../support/db.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

/** What a decorated call saw: the key of the lease its own application's service reports as current. */
abstract class Probe {
  constructor(readonly leases: LeaseService) {}

  @Exclusive('probe:{0}')
  async probe(id: string): Promise<string | undefined> {
    return this.leases.current()?.targetKey;
  }
}

@Injectable()
class SingletonProbe extends Probe {
  constructor(@Inject(LeaseService) leases: LeaseService) {
    super(leases);
  }
}

@Injectable({ scope: Scope.TRANSIENT })
class TransientProbe extends Probe {
  constructor(@Inject(LeaseService) leases: LeaseService) {
    super(leases);
  }
}

@Injectable({ scope: Scope.REQUEST })
class RequestProbe extends Probe {
  constructor(@Inject(LeaseService) leases: LeaseService) {
    super(leases);
  }
}

describe('the application a decorated method belongs to', () => {
  const db = useTestDatabase('registries');
  const apps: INestApplicationContext[] = [];
  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
  });

  async function start(name: string, leaseModules = 1): Promise<INestApplicationContext> {
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities], name: undefined }),
        ...Array.from({ length: leaseModules }, () =>
          LeaseModule.forRoot(mergeLeaseOptions(FAST, { tables: { createSchema: true }, owner: `${name}-owner` })),
        ),
      ],
      providers: [SingletonProbe, TransientProbe, RequestProbe],
    })
    class AppModule {}
    Object.defineProperty(AppModule, 'name', { value: `${name}Module` });
    const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error'] });
    apps.push(app);
    return app;
  }

  async function calls(app: INestApplicationContext, id: string): Promise<Array<string | undefined>> {
    const resolve = <T>(type: Type<T>) => app.resolve(type, ContextIdFactory.create());
    return [
      await app.get(SingletonProbe).probe(id),
      await (await resolve(TransientProbe)).probe(id),
      await (await resolve(RequestProbe)).probe(id),
    ];
  }

  test.each([
    ['A', 'B'],
    ['B', 'A'],
  ])(
    'two applications in one process (%s started first): each instance runs under its own application',
    async (first, second) => {
      const apps = { [first]: await start(first), [second]: await start(second) };
      for (const name of ['A', 'B']) {
        expect(await calls(apps[name], name)).toEqual([`probe:${name}`, `probe:${name}`, `probe:${name}`]);
      }
    },
  );

  test('a second LeaseModule in one application is refused at bootstrap with advice', async () => {
    const failure = await start('Twice', 2).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(LeaseConfigError);
    expect(String((failure as Error).message)).toMatch(/LeaseModule.*once/);
  });
});
