/**
 * The HTTP scenario's server, run as a child process of bench/run.ts so the load generator does not share its
 * event loop: the same handlers undecorated and under `@Exclusive` (one returns at once, one writes a row first, one
 * writes it as the lease's last fenced save with the release riding on it), on 127.0.0.1. Prints `listening <port>`.
 */
import 'reflect-metadata';
import { Session } from 'node:inspector/promises';
import { Controller, Get, Module, Query } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { CurrentLease, Exclusive, type Lease, LeaseModule } from 'nest-pg-lease';
import pg from 'pg';
import { countStatements, statementsSoFar } from './support/db.js';
import { BENCH_LEASE_OPTIONS } from './support/contenders.js';
import { mergeLeaseOptions } from '../libs/lease/src/internal.js';

const url = process.env.BENCH_DATABASE_URL;
if (!url) throw new Error('BENCH_DATABASE_URL is not set: this server is started by bench/run.ts');

countStatements();
let profiler = new Session();
/** The handlers' own database work, on a pool of its own (the lease module owns its DataSource). */
const appPool = new pg.Pool({ connectionString: url, max: 16 });
const write = (k: string) =>
  appPool.query({
    name: 'bench_write',
    text: 'UPDATE bench_counter SET n = n + 1 WHERE id = $1',
    values: [Number(k) % 64],
  });

@Controller()
class BenchController {
  @Get('plain')
  plain(@Query('k') k: string) {
    return { k };
  }

  @Get('exclusive')
  @Exclusive('bench:{k}')
  exclusive(@Query('k') k: string) {
    return { k };
  }

  @Get('plain-write')
  async plainWrite(@Query('k') k: string) {
    await write(k);
    return { k };
  }

  @Get('exclusive-write')
  @Exclusive('bench:{k}')
  async exclusiveWrite(@Query('k') k: string) {
    await write(k);
    return { k };
  }

  /** The same write as the lease's last save, the release riding on its commit: one commit for save + release. */
  @Get('exclusive-save')
  @Exclusive('bench:{k}')
  async exclusiveSave(@Query('k') k: string, @CurrentLease() lease: Lease) {
    await lease.fenced(
      (manager) => manager.query('UPDATE bench_counter SET n = n + 1 WHERE id = $1', [Number(k) % 64]),
      {
        release: true,
      },
    );
    return { k };
  }

  /** A V8 CPU profile of this process between `start` and `stop` (`npm run bench:profile -- --http`). */
  @Get('profile/start')
  async profileStart() {
    profiler = new Session();
    profiler.connect();
    await profiler.post('Profiler.enable');
    await profiler.post('Profiler.setSamplingInterval', { interval: 100 });
    await profiler.post('Profiler.start');
    return { started: true };
  }

  @Get('profile/stop')
  async profileStop() {
    const { profile } = await profiler.post('Profiler.stop');
    profiler.disconnect();
    return profile;
  }

  /** CPU time (user + system) this process has used so far, in µs: the parent turns it into CPU per request. */
  @Get('cpu')
  cpu() {
    const { user, system } = process.cpuUsage();
    return { us: user + system };
  }

  /** Statements this process has sent so far: the parent turns differences into round trips per request. */
  @Get('statements')
  statements() {
    return { statements: statementsSoFar() };
  }
}

@Module({
  imports: [
    LeaseModule.forRoot(
      mergeLeaseOptions(BENCH_LEASE_OPTIONS, {
        connections: { dataSource: { type: 'postgres', url, extra: { max: 16 } } },
      }),
    ),
  ],
  controllers: [BenchController],
})
class BenchAppModule {}

const app = await NestFactory.create(BenchAppModule, { logger: ['error', 'warn'] });
app.enableShutdownHooks();
process.once('SIGTERM', () => {
  void appPool.end();
});
await app.listen(0, '127.0.0.1');
console.log(`listening ${(app.getHttpServer().address() as { port: number }).port}`);
