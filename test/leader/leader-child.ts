/**
 * One app instance of the leader-election specs, run with `node --import tsx`: a Nest application context with
 * `LeaseModule` and a `@LeaderElection(key, { priority })` provider. While it leads it writes a row every 50 ms through
 * `lease.fenced()` to the history table (term = fencing token), until a write is refused. Reports over IPC:
 * `elected` / `revoked` / `refused` with its own wall clock (`at`). SIGTERM closes the app (enableShutdownHooks).
 */
import 'reflect-metadata';

interface ChildConfig {
  url: string;
  name: string;
  key: string;
  priority: number;
  table: string;
  options: Record<string, unknown>;
}

const config = JSON.parse(process.env.LEADER_CHILD ?? '{}') as ChildConfig;
/**
 * Resolves once the message is handed to the IPC channel: a SIGTERM'd child closes its app and Nest then raises the
 * signal again, killing the process, so a report sent during shutdown is awaited by the callback that sends it.
 */
const send = (message: Record<string, unknown>) =>
  new Promise<void>((resolve) => {
    if (!process.send) return resolve();
    process.send(message, undefined, undefined, () => resolve());
  });
process.on('disconnect', () => process.exit(0));
setTimeout(() => process.exit(3), 180_000).unref();

const { Injectable, Module } = await import('@nestjs/common');
const { NestFactory } = await import('@nestjs/core');
const { TypeOrmModule } = await import('@nestjs/typeorm');
const { LeaderElection, LeaseModule, leaseEntities } = await import('nest-pg-lease');
type Lease = import('nest-pg-lease').Lease;

@LeaderElection(config.key, { priority: config.priority })
@Injectable()
class Role {
  onElected(lease: Lease): void {
    void send({ type: 'elected', token: String(lease.fencingToken), at: Date.now() });
    void this.write(lease);
  }

  /** Awaited by the library (within shutdownGraceMs at a stop): the report is out before the process ends. */
  onRevoked(reason: string): Promise<void> {
    return send({ type: 'revoked', reason, at: Date.now() });
  }

  /** Fenced writes until one is refused: after a loss, the first write tells whether the fence holds. */
  private async write(lease: Lease): Promise<void> {
    for (let seq = 0; ; seq++) {
      try {
        await lease.fenced((manager) =>
          manager.query(`INSERT INTO ${config.table} (token, instance, seq, at) VALUES ($1, $2, $3, $4)`, [
            String(lease.fencingToken),
            config.name,
            seq,
            Date.now(),
          ]),
        );
      } catch (error) {
        void send({ type: 'refused', token: String(lease.fencingToken), error: String(error), at: Date.now() });
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

@Module({
  imports: [
    TypeOrmModule.forRoot({ type: 'postgres', url: config.url, entities: [...leaseEntities], extra: { max: 4 } }),
    LeaseModule.forRoot({ ...config.options, owner: config.name }),
  ],
  providers: [Role],
})
class ChildModule {}

const app = await NestFactory.createApplicationContext(ChildModule, { logger: ['error', 'warn'] });
app.enableShutdownHooks();
void send({ type: 'ready' });
