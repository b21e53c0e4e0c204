/**
 * Issue 28, item 1: GraphQL resolvers are a door like the others (Apollo driver, real HTTP): keys from `@Args`
 * names (checked at bootstrap), lease errors answered as GraphQL errors (`extensions.code` CONFLICT /
 * SERVICE_UNAVAILABLE, `retryAfterMs`), and `LeaseExceptionFilter`, registered globally, safe on a GraphQL host.
 */
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Inject, Injectable } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  CurrentLease,
  Exclusive,
  type Lease,
  LeaseConfigError,
  LeaseExceptionFilter,
  LeaseModule,
  LeaseService,
  leaseEntities,
} from 'nest-pg-lease';
import { eventually, FAST, useTestDatabase } from '../support/db.js';
import { Gate, post, startApp } from './fixtures.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

const gates = new Map<string, Gate>();
const gate = (name: string) => gates.get(name) ?? gates.set(name, new Gate()).get(name)!;

@ObjectType()
class Report {
  @Field(() => String)
  key!: string;
  @Field(() => String, { nullable: true })
  current?: string;
}

@Injectable()
class ReportsService {
  @Exclusive('report:{0}')
  async build(userId: string): Promise<Report> {
    return { key: `report:${userId}` };
  }
}

@Resolver(() => Report)
class ReportsResolver {
  constructor(
    @Inject(LeaseService) private readonly leases: LeaseService,
    @Inject(ReportsService) private readonly reports: ReportsService,
  ) {}

  @Mutation(() => Report)
  @Exclusive('report:{userId}')
  async buildReport(
    @Args('userId', { type: () => String }) userId: string,
    @Args('gate', { type: () => String }) gateName: string,
    @CurrentLease() lease: Lease,
  ): Promise<Report> {
    const g = gate(gateName);
    g.entered += 1;
    await g.opened;
    return { key: lease.targetKey, current: this.leases.current()?.targetKey };
  }

  @Mutation(() => Report)
  @Exclusive('queued:{userId}', { onBusy: { wait: { timeoutMs: 200 } } })
  async queued(@Args('userId', { type: () => String }) userId: string): Promise<Report> {
    return { key: `queued:${userId}` };
  }

  /** Undecorated: the lease error comes from a decorated provider method, mapped by the global filter. */
  @Query(() => Report)
  async viaService(@Args('userId', { type: () => String }) userId: string): Promise<Report> {
    return this.reports.build(userId);
  }
}

@Resolver(() => Report)
class BadResolver {
  @Query(() => Report)
  @Exclusive('report:{missing}')
  async bad(@Args('userId', { type: () => String }) userId: string): Promise<Report> {
    return { key: userId };
  }
}

function graphqlModule() {
  return GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true });
}

describe('@Exclusive on GraphQL resolvers (Apollo)', () => {
  const db = useTestDatabase('graphql');
  let url: string;
  let close: () => Promise<void>;

  const gql = async (query: string, variables: Record<string, unknown> = {}) =>
    (await post(`${url}/graphql`, { query, variables })).body as {
      data?: Record<string, any> | null;
      errors?: Array<{ message: string; extensions: Record<string, any> }>;
    };

  beforeAll(async () => {
    const started = await startApp(
      [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        LeaseModule.forRoot(mergeLeaseOptions(FAST, { tables: { createSchema: true } })),
        graphqlModule(),
      ],
      [],
      [ReportsResolver, ReportsService, { provide: APP_FILTER, useClass: LeaseExceptionFilter }],
    );
    url = started.url;
    close = () => started.app.close();
  });

  afterEach(() => gates.forEach((g) => g.release()));
  db.beforeDrop(() => close());

  const build = `mutation ($userId: String!, $gate: String!) { buildReport(userId: $userId, gate: $gate) { key current } }`;

  test('{userId} comes from @Args("userId"); a busy key is a CONFLICT GraphQL error with retryAfterMs', async () => {
    const first = gql(build, { userId: 'u1', gate: 'g1' });
    await eventually(
      () => gate('g1').entered,
      (n) => n === 1,
      'the first call to hold report:u1',
    );
    const refused = await gql(build, { userId: 'u1', gate: 'g2' });
    expect(refused.errors).toHaveLength(1);
    expect(refused.errors![0].message).toMatch(
      /"report:u1" is busy: another request is working on it\. Try again in \d+ s/,
    );
    expect(refused.errors![0].extensions).toMatchObject({
      code: 'CONFLICT',
      leaseError: 'LeaseBusyError',
      targetKey: 'report:u1',
    });
    expect(refused.errors![0].extensions.retryAfterMs).toBeGreaterThan(0);
    expect(gate('g2').entered).toBe(0);
    gate('g1').release();
    expect((await first).data).toEqual({ buildReport: { key: 'report:u1', current: 'report:u1' } });
  });

  test('a wait that times out is a SERVICE_UNAVAILABLE GraphQL error', async () => {
    const holder = (await startedService().tryAcquire('queued:u2'))!;
    try {
      const answer = await gql(`mutation { queued(userId: "u2") { key } }`);
      expect(answer.errors![0].extensions).toMatchObject({
        code: 'SERVICE_UNAVAILABLE',
        leaseError: 'LeaseWaitTimeoutError',
        targetKey: 'queued:u2',
        retryAfterMs: 200,
      });
    } finally {
      await holder.release();
    }
  });

  test('with LeaseExceptionFilter global, a provider lease error in a resolver is a GraphQL error, not a crash', async () => {
    const holder = (await startedService().tryAcquire('report:u3'))!;
    try {
      const answer = await gql(`query { viaService(userId: "u3") { key } }`);
      expect(answer.errors).toHaveLength(1);
      expect(answer.errors![0].message).not.toMatch(/response\.status is not a function/);
      expect(answer.errors![0].extensions).toMatchObject({ code: 'CONFLICT', targetKey: 'report:u3' });
      expect(answer.errors![0].extensions.retryAfterMs).toBeGreaterThan(0);
    } finally {
      await holder.release();
    }
    expect((await gql(`query { viaService(userId: "u3") { key } }`)).data).toEqual({
      viaService: { key: 'report:u3' },
    });
  });

  test('a placeholder no @Args declares fails the bootstrap, naming the resolver', async () => {
    const started = startApp(
      [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        LeaseModule.forRoot(FAST),
        graphqlModule(),
      ],
      [],
      [BadResolver],
    );
    const error = await started.then(
      async ({ app }) => {
        await app.close();
        return undefined;
      },
      (failure: unknown) => failure,
    );
    expect(error).toBeInstanceOf(LeaseConfigError);
    expect((error as Error).message).toMatch(/BadResolver\.bad.*\{missing\}.*@Args\('missing'\)/s);
  });

  /** A second service on the same database, a holder of its own. */
  let other: LeaseService | undefined;
  function startedService(): LeaseService {
    if (!other) throw new Error('the other service opens in beforeAll');
    return other;
  }
  beforeAll(async () => {
    other = (await db.open()).service;
  });
});
