/**
 * Issue 12, items 4–7 in one process: `@Exclusive` on a provider method holds whoever calls the method and whatever
 * the module import order — the scheduler that captured it at its own `onModuleInit`, a provider that kept a
 * reference, a lazily loaded module, a transient provider; `onBusy: 'skip'`; `holdAtLeastMs`; a warning for a
 * synchronous method.
 */
import {
  Inject,
  Injectable,
  type LoggerService,
  Module,
  type Provider,
  Scope,
  type Type,
  type DynamicModule,
} from '@nestjs/common';
import { LazyModuleLoader, NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Exclusive, LeaseBusyError, LeaseModule, LeaseService, leaseEntities, type LeaseEvent } from 'nest-pg-lease';
import { eventually, FAST, useTestDatabase } from '../support/db.js';
import { Gate } from '../exclusive/fixtures.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

/** Every log line of an app, by level. */
class RecordingLogger implements LoggerService {
  readonly lines: Array<{ level: string; message: string }> = [];
  private record(level: string, message: unknown, rest: unknown[]) {
    this.lines.push({
      level,
      message: [message, ...rest].map((part) => (part instanceof Error ? part.stack : String(part))).join(' '),
    });
  }
  log(message: unknown, ...rest: unknown[]) {
    this.record('log', message, rest);
  }
  error(message: unknown, ...rest: unknown[]) {
    this.record('error', message, rest);
  }
  warn(message: unknown, ...rest: unknown[]) {
    this.record('warn', message, rest);
  }
  debug(message: unknown, ...rest: unknown[]) {
    this.record('debug', message, rest);
  }
  verbose(message: unknown, ...rest: unknown[]) {
    this.record('verbose', message, rest);
  }
  at(...levels: string[]) {
    return this.lines.filter((line) => levels.includes(line.level));
  }
}

interface Run {
  fencingToken?: bigint;
  owner?: string;
}

@Injectable()
class TickJob {
  readonly runs: Run[] = [];
  constructor(@Inject(LeaseService) private readonly leases: LeaseService) {}

  @Cron('* * * * * *')
  @Exclusive('tick', { onBusy: 'skip' })
  async tick(): Promise<void> {
    this.runs.push({ fencingToken: this.leases.current()?.fencingToken, owner: this.leases.options.owner });
  }
}

@Injectable()
class Work {
  readonly gate = new Gate();
  constructor(@Inject(LeaseService) private readonly leases: LeaseService) {}

  @Exclusive('work:{0}')
  async run(id: string): Promise<string | undefined> {
    return this.leases.current()?.targetKey;
  }

  @Exclusive('busy:{0}', { onBusy: 'skip' })
  async skipping(id: string, wait = false): Promise<string> {
    if (wait) {
      this.gate.entered += 1;
      await this.gate.opened;
    }
    return `ran ${id} as ${this.leases.current()?.fencingToken}`;
  }

  @Exclusive('busy:{0}')
  async throwing(id: string): Promise<string> {
    return `ran ${id}`;
  }

  @Exclusive('short:{0}', { holdAtLeastMs: 1_500, onBusy: 'skip' })
  async short(id: string): Promise<bigint | undefined> {
    return this.leases.current()?.fencingToken;
  }

  /** Synchronous: decorated, it returns a Promise (acquiring needs the database); bootstrap warns. */
  @Exclusive('sync')
  compute(): number {
    return 42;
  }

  /** `this` is the instance, whoever calls. */
  @Exclusive('self')
  async self(): Promise<boolean> {
    return this instanceof Work && this.leases.current()?.targetKey === 'self';
  }
}

/** Keeps the method before LeaseModule could touch the instance: as a scheduler or an event emitter does. */
@Injectable()
class EarlyCapture {
  readonly captured: (id: string) => Promise<string | undefined>;
  constructor(@Inject(Work) work: Work) {
    this.captured = work.run.bind(work);
  }
}

@Injectable({ scope: Scope.TRANSIENT })
class TransientJob {
  constructor(@Inject(LeaseService) private readonly leases: LeaseService) {}
  @Exclusive('transient:{0}')
  async run(id: string): Promise<string | undefined> {
    return this.leases.current()?.targetKey;
  }
}

@Injectable()
class UsesTransient {
  constructor(@Inject(TransientJob) readonly job: TransientJob) {}
}

@Injectable()
class LazyJob {
  constructor(@Inject(LeaseService) private readonly leases: LeaseService) {}
  @Exclusive('lazy:{0}')
  async run(id: string): Promise<string | undefined> {
    return this.leases.current()?.targetKey;
  }
}

@Module({ providers: [LazyJob], exports: [LazyJob] })
class LazyJobsModule {}

describe('@Exclusive on provider methods', () => {
  const db = useTestDatabase('providers');

  async function boot(imports: Array<Type | DynamicModule>, providers: Provider[], owner: string) {
    const logger = new RecordingLogger();
    @Module({ imports, providers })
    class AppModule {}
    const app = await NestFactory.create(AppModule, { logger });
    await app.init();
    const events: LeaseEvent[] = [];
    app.get(LeaseService).events$.subscribe((event) => events.push(event));
    return { app, logger, events, owner };
  }
  const typeorm = () => TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] });
  const lease = (owner: string) =>
    LeaseModule.forRoot(mergeLeaseOptions(FAST, { tables: { createSchema: true }, owner }));

  for (const order of ['ScheduleModule first', 'LeaseModule first'] as const) {
    test(`@Cron + @Exclusive runs under a lease with ${order}`, async () => {
      const owner = `cron-${order.split(' ')[0].toLowerCase()}`;
      const imports =
        order === 'ScheduleModule first'
          ? [ScheduleModule.forRoot(), typeorm(), lease(owner)]
          : [typeorm(), lease(owner), ScheduleModule.forRoot()];
      const { app, logger } = await boot(imports, [TickJob], owner);
      try {
        const job = app.get(TickJob);
        await eventually(
          () => job.runs.length,
          (n) => n >= 2,
          'two scheduled runs',
          15_000,
        );
        for (const run of job.runs) expect(run.fencingToken).toEqual(expect.any(BigInt));
        expect(logger.at('error', 'warn')).toEqual([]);
      } finally {
        await app.close();
      }
    });
  }

  test('a reference taken before LeaseModule initialised, `this`, and a transient provider: all run under the lease', async () => {
    const { app } = await boot([typeorm(), lease('early')], [Work, EarlyCapture, TransientJob, UsesTransient], 'early');
    try {
      await expect(app.get(EarlyCapture).captured('e1')).resolves.toBe('work:e1');
      await expect(app.get(Work).self()).resolves.toBe(true);
      await expect(app.get(UsesTransient).job.run('t1')).resolves.toBe('transient:t1');
    } finally {
      await app.close();
    }
  });

  test('a provider of a lazily loaded module runs under the lease', async () => {
    const { app, logger } = await boot([typeorm(), lease('lazy')], [], 'lazy');
    try {
      const loaded = await app.get(LazyModuleLoader).load(() => LazyJobsModule);
      await expect(loaded.get(LazyJob).run('l1')).resolves.toBe('lazy:l1');
      expect(logger.at('error', 'warn')).toEqual([]);
    } finally {
      await app.close();
    }
  });

  test("onBusy: 'skip' resolves undefined on a busy target, emits 'busy' and logs nothing above debug; the default throws", async () => {
    const { app, logger, events } = await boot([typeorm(), lease('skip')], [Work], 'skip');
    try {
      const work = app.get(Work);
      const holding = work.skipping('s', true);
      await eventually(
        () => work.gate.entered,
        (n) => n === 1,
        'the first call to hold busy:s',
      );
      const before = logger.lines.length;
      await expect(work.skipping('s')).resolves.toBeUndefined();
      await expect(work.throwing('s')).rejects.toBeInstanceOf(LeaseBusyError);
      expect(events.filter((event) => event.type === 'busy' && event.targetKey === 'busy:s')).toHaveLength(2);
      expect(logger.lines.slice(before).filter((line) => line.level !== 'debug' && line.level !== 'verbose')).toEqual(
        [],
      );
      work.gate.release();
      await expect(holding).resolves.toMatch(/^ran s as \d+$/);
      await expect(work.skipping('s')).resolves.toMatch(/^ran s as \d+$/);
    } finally {
      await app.close();
    }
  });

  test('holdAtLeastMs: a fast method keeps the target taken until holdAtLeastMs after its acquisition', async () => {
    const { app } = await boot([typeorm(), lease('hold')], [Work], 'hold');
    try {
      const work = app.get(Work);
      const started = performance.now();
      const first = await work.short('h');
      expect(first).toEqual(expect.any(BigInt));
      // Released at once, yet still taken: a second run right after is skipped.
      const second = await work.short('h');
      if (performance.now() - started < 1_200) expect(second).toBeUndefined();
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, 1_700 - (performance.now() - started))));
      const third = await work.short('h');
      expect(third).toEqual(expect.any(BigInt));
      expect(third!).toBeGreaterThan(first!);
    } finally {
      await app.close();
    }
  });

  test('a synchronous decorated method returns a Promise, and bootstrap says so once', async () => {
    const { app, logger } = await boot([typeorm(), lease('sync')], [Work], 'sync');
    try {
      const result = app.get(Work).compute() as unknown;
      expect(result).toBeInstanceOf(Promise);
      await expect(result).resolves.toBe(42);
      const warnings = logger.at('warn').filter((line) => line.message.includes('Work.compute'));
      expect(warnings).toHaveLength(1);
      expect(warnings[0].message).toMatch(/returns a Promise/);
    } finally {
      await app.close();
    }
  });

  test('two applications in one process: each instance runs under its own application’s LeaseService', async () => {
    const a = await boot([typeorm(), lease('app-a')], [Work], 'app-a');
    const b = await boot([typeorm(), lease('app-b')], [Work], 'app-b');
    try {
      await a.app.get(Work).run('x');
      await b.app.get(Work).run('y');
      const acquired = (events: LeaseEvent[]) =>
        events.filter((event) => event.type === 'acquired').map((event) => event.targetKey);
      expect(acquired(a.events)).toEqual(['work:x']);
      expect(acquired(b.events)).toEqual(['work:y']);
    } finally {
      await a.app.close();
      await b.app.close();
    }
  });
});
