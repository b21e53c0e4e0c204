/**
 * One app instance of the three-instance cron test, run with `node --import tsx`: a Nest app with `@nestjs/schedule`
 * and `LeaseModule` (in the import order the parent asks for) and a `@Cron('* * * * * *')` job under
 * `@Exclusive(…, { holdAtLeastMs, onBusy: 'skip' })`. Its clock is shifted by `skewMs` (Date and Date.now, so the
 * scheduler fires early by that much). Each run inserts one row: its tick second (by its own clock) and its fencing
 * token (NULL if it ran without a lease). Reports its log lines above `log`, and the ticks it skipped, on exit.
 */
interface InstanceConfig {
  url: string;
  name: string;
  skewMs: number;
  order: 'schedule-first' | 'lease-first';
  key: string;
  table: string;
  holdAtLeastMs: number;
  /** `@Sticky(key, { onBusy: 'skip' })` instead of holdAtLeastMs (issue 23, part 3). */
  sticky?: boolean;
}

const config = JSON.parse(process.env.CRON_INSTANCE ?? '{}') as InstanceConfig;

// The skew must be in place before the scheduler (cron, luxon) reads the clock.
const RealDate = Date;
class SkewedDate extends RealDate {
  constructor(...args: unknown[]) {
    if (args.length === 0) super(RealDate.now() + config.skewMs);
    else super(...(args as [string | number | Date]));
  }
  static override now(): number {
    return RealDate.now() + config.skewMs;
  }
}
globalThis.Date = SkewedDate as DateConstructor;

process.on('disconnect', () => process.exit(0));
setTimeout(() => process.exit(3), 120_000).unref();

const { Inject, Injectable, Module } = await import('@nestjs/common');
const { NestFactory } = await import('@nestjs/core');
const { Cron, ScheduleModule } = await import('@nestjs/schedule');
const { TypeOrmModule } = await import('@nestjs/typeorm');
const { DataSource } = await import('typeorm');
const { Exclusive, LeaseModule, LeaseService, Sticky, leaseEntities } = await import('nest-pg-lease');

/** Once per tick: a sticky owner, or `holdAtLeastMs` against the other instances' late timers. */
const oncePerTick = config.sticky
  ? Sticky(config.key, { onBusy: 'skip' })
  : Exclusive(config.key, { holdAtLeastMs: config.holdAtLeastMs, onBusy: 'skip' });

const problems: Array<{ level: string; message: string }> = [];
const logger = {
  log: () => undefined,
  debug: () => undefined,
  verbose: () => undefined,
  warn: (...parts: unknown[]) => problems.push({ level: 'warn', message: parts.map(String).join(' ') }),
  error: (...parts: unknown[]) =>
    problems.push({ level: 'error', message: parts.map((p) => (p instanceof Error ? p.stack : String(p))).join(' ') }),
  fatal: (...parts: unknown[]) => problems.push({ level: 'fatal', message: parts.map(String).join(' ') }),
};

@Injectable()
class TickJob {
  constructor(
    @Inject(LeaseService) private readonly leases: InstanceType<typeof LeaseService>,
    @Inject(DataSource) private readonly dataSource: InstanceType<typeof DataSource>,
  ) {}

  @Cron('* * * * * *')
  @oncePerTick
  async tick(): Promise<void> {
    // The instance's own idea of the tick: its (skewed) clock, rounded to the second the scheduler aimed at.
    const tickSecond = Math.round(Date.now() / 1000);
    const insert = `INSERT INTO ${config.table} (tick_second, fencing_token, instance, real_ms)
      VALUES ($1, $2, $3, $4)`;
    const lease = this.leases.current();
    if (lease) {
      await lease.fenced((manager) =>
        manager.query(insert, [tickSecond, String(lease.fencingToken), config.name, RealDate.now()]),
      );
    } else {
      await this.dataSource.query(insert, [tickSecond, null, config.name, RealDate.now()]);
    }
  }
}

const typeorm = TypeOrmModule.forRoot({
  type: 'postgres',
  url: config.url,
  entities: [...leaseEntities],
  extra: { max: 4 },
});
const leases = LeaseModule.forRoot({ timing: { heartbeatIntervalMs: 200, leaseTimeoutMs: 2_000 }, owner: config.name });
const schedule = ScheduleModule.forRoot();

@Module({
  imports: config.order === 'schedule-first' ? [schedule, typeorm, leases] : [typeorm, leases, schedule],
  providers: [TickJob],
})
class InstanceModule {}

const app = await NestFactory.createApplicationContext(InstanceModule, { logger });
// The ticks this instance skipped because another instance had the target: evidence that it did try.
const skipped: number[] = [];
// When this instance became a sticky owner (real clock).
const elected: number[] = [];
app.get(LeaseService).events$.subscribe((event) => {
  if (event.type === 'busy' && event.targetKey === config.key) skipped.push(Math.round(Date.now() / 1000));
  if (event.type === 'elected' && event.targetKey === config.key) elected.push(RealDate.now());
});
process.send?.({ type: 'ready' });
process.on('message', (message) => {
  if (message !== 'stop') return;
  void app
    .close()
    .finally(() => process.send?.({ type: 'stopped', problems, skipped, elected }, () => process.disconnect?.()));
});
