/**
 * One app instance of the two-process drain test (issue 23, part 1), run with `node --import tsx`: a Nest application
 * context with `enableShutdownHooks()` and a provider whose `@Exclusive` job writes `start` to a history table, tells
 * the parent it started, does its slow unfenced work (a sleep that ignores the lease's signal, as an external call
 * that cannot be cancelled would), then writes `end` through `fenced()`. On `{ type: 'run', jobMs }` it runs the job
 * once; on `{ type: 'try' }` it keeps calling the job (jobMs 0) until one call gets the lease, sending `busy` at the
 * first refusal and `ran` once it ran; on `stop` it closes. SIGTERM is Nest's: the drain, then the process exits.
 */
import 'reflect-metadata';
import { Inject, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Exclusive, LeaseBusyError, LeaseModule, LeaseService, leaseEntities } from 'nest-pg-lease';
import { DataSource } from 'typeorm';

interface InstanceConfig {
  url: string;
  name: string;
  key: string;
  table: string;
  shutdownGraceMs: number;
}

const config = JSON.parse(process.env.DRAIN_INSTANCE ?? '{}') as InstanceConfig;
process.on('disconnect', () => process.exit(0));
setTimeout(() => process.exit(3), 120_000).unref();

@Injectable()
class Job {
  constructor(
    @Inject(LeaseService) private readonly leases: LeaseService,
    @Inject(DataSource) private readonly dataSource: DataSource,
  ) {}

  @Exclusive(config.key)
  async run(jobMs: number): Promise<void> {
    const insert = `INSERT INTO ${config.table} (instance, event) VALUES ($1, $2)`;
    await this.dataSource.query(insert, [config.name, 'start']);
    process.send?.({ type: 'started' });
    await new Promise((resolve) => setTimeout(resolve, jobMs));
    await this.leases.current()!.fenced((manager) => manager.query(insert, [config.name, 'end']));
  }
}

@Module({
  imports: [
    TypeOrmModule.forRoot({ type: 'postgres', url: config.url, entities: [...leaseEntities], extra: { max: 4 } }),
    LeaseModule.forRoot({
      timing: { heartbeatIntervalMs: 200, leaseTimeoutMs: 2_000, shutdownGraceMs: config.shutdownGraceMs },
      owner: config.name,
    }),
  ],
  providers: [Job],
})
class InstanceModule {}

const app = await NestFactory.createApplicationContext(InstanceModule, { logger: ['error', 'warn'] });
app.enableShutdownHooks(['SIGTERM']);
const job = app.get(Job);

async function keepTrying(): Promise<void> {
  let busy = 0;
  for (;;) {
    try {
      await job.run(0);
      process.send?.({ type: 'ran', busy });
      return;
    } catch (error) {
      if (!(error instanceof LeaseBusyError)) throw error;
      if (busy++ === 0) process.send?.({ type: 'busy' });
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

process.on('message', (message: { type: string; jobMs?: number }) => {
  if (message.type === 'run') {
    void job
      .run(message.jobMs ?? 0)
      .catch((error: unknown) => process.send?.({ type: 'failed', error: String(error) }));
  }
  if (message.type === 'try') {
    void keepTrying().catch((error: unknown) => process.send?.({ type: 'failed', error: String(error) }));
  }
  if (message.type === 'stop') void app.close().finally(() => process.disconnect?.());
});
process.send?.({ type: 'ready' });
