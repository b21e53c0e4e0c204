import type { ModuleRef } from '@nestjs/core';
import { getDataSourceToken } from '@nestjs/typeorm';
import type pg from 'pg';
import { DataSource, type EntityManager } from 'typeorm';
import type { PostgresDriver } from 'typeorm/driver/postgres/PostgresDriver.js';
import { LeaseConfigError } from '../errors/lease.errors.js';
import { closeStepMs, connectBoundMs, statementPoolBoundMs } from '../options/bounds.js';
import type { LeaseModuleOptions } from '../interfaces/lease-module-options.interface.js';
import type { EngineSettings } from '../options/engine-settings.js';
import { settleBy } from '../util/settle-by.js';
import { listenToNewClients } from './sockets.js';
import { StatementPool } from './statement-pool.js';
import { messages } from '../errors/lease.messages.js';
import { adoptCommittedTransaction, adoptOpenedTransaction } from './typeorm-transaction.js';
import { canExchange, exchange, SCANS_OFF, type BoundStatement } from './exchange.js';

/** The isolation levels a DataSource's `isolationLevel` may name (TypeORM's for PostgreSQL). */
const ISOLATION_LEVELS: ReadonlySet<string> = new Set([
  'READ UNCOMMITTED',
  'READ COMMITTED',
  'REPEATABLE READ',
  'SERIALIZABLE',
]);

/**
 * `statements` in one round trip, their rows in order: one exchange when a statement is prepared (it has a name) and
 * the client speaks the protocol itself — the prepared ones planned with scans off (`SCANS_OFF`, sent just before the
 * first of them) — else one simple-query message, each statement's values written in as literals. Either way the
 * server skips what follows a failed statement.
 */
async function together(
  client: pg.ClientBase,
  statements: readonly BoundStatement[],
): Promise<Array<Array<Record<string, unknown>>>> {
  const first = statements.findIndex((statement) => statement.name);
  if (first >= 0 && canExchange(client)) {
    const rows = await exchange(client, [...statements.slice(0, first), SCANS_OFF, ...statements.slice(first)]);
    rows.splice(first, 1);
    return rows;
  }
  const text = statements.map((statement) => (statement.values ? statement.inline!() : statement.text)).join('; ');
  const results: unknown = await client.query(text);
  return (results as pg.QueryResult[]).map((one) => one.rows);
}

/** Where the lease engine gets its DataSource: a given one, or one resolved (or created) at bootstrap. */
export interface LeaseDataSourceRef {
  resolve(): Promise<DataSource>;
  /** Destroys the DataSource if the module created it. */
  close(): Promise<void>;
}

function isDataSourceRef(value: unknown): value is LeaseDataSourceRef {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as LeaseDataSourceRef).resolve === 'function' &&
    !(value instanceof DataSource)
  );
}

/** Which of the library's own connections a configuration is for (its `application_name` suffix). */
export type SessionRole = 'statements' | 'heartbeat' | 'waiters' | 'listen';

function notPostgres(type: unknown, advice: string): LeaseConfigError {
  return new LeaseConfigError(messages.notPostgres(String(type), advice));
}

/**
 * Resolves the DataSource in `onModuleInit`, when every provider of every module exists: the app's default
 * `@nestjs/typeorm` DataSource, a named one (`connections.dataSourceName`), or one made from `connections.dataSource`
 * and owned.
 */
export class ModuleDataSourceRef implements LeaseDataSourceRef {
  private owned?: DataSource;

  /** The module's `connections` group (checked by the engine, built before this is resolved). */
  private readonly options: NonNullable<LeaseModuleOptions['connections']>;

  constructor(
    options: LeaseModuleOptions,
    private readonly moduleRef: ModuleRef,
  ) {
    this.options = options.connections ?? {};
  }

  async resolve(): Promise<DataSource> {
    if (this.options.dataSource) {
      if (this.options.dataSourceName) {
        throw new LeaseConfigError(messages.dataSourceAndName());
      }
      // Before the DataSource exists: TypeORM loads the driver package in its constructor, and a user who asked for
      // another database would only hear "install mysql2".
      if (this.options.dataSource.type !== 'postgres') {
        throw notPostgres(this.options.dataSource.type, "set connections.dataSource.type to 'postgres'");
      }
      this.owned ??= new DataSource(this.options.dataSource);
      if (!this.owned.isInitialized) await this.owned.initialize();
      return this.owned;
    }
    const token = getDataSourceToken(this.options.dataSourceName);
    let dataSource: DataSource | undefined;
    try {
      dataSource = this.moduleRef.get<DataSource>(token, { strict: false });
    } catch {
      dataSource = undefined;
    }
    if (!(dataSource instanceof DataSource)) {
      const named = this.options.dataSourceName;
      throw new LeaseConfigError(
        messages.dataSourceNotFound(named ? `named "${named}"` : '(default)', named ? ` with name "${named}"` : ''),
      );
    }
    return dataSource;
  }

  async close(): Promise<void> {
    if (this.owned?.isInitialized) await this.owned.destroy();
  }
}

/**
 * Everything the engine knows about TypeORM, in one place: which DataSource (given, resolved from Nest, or owned),
 * the PostgreSQL check, the connection settings of the library's own connections (taken from the DataSource's pool),
 * the library's statement pool, and the transactions of `fenced()`. The rest of the library sees a pool
 * (`StatementPool`) and `EntityManager`s.
 */
export class LeaseDatabase {
  private dataSource?: DataSource;
  private readonly ref?: LeaseDataSourceRef;
  /** The library's own connections for its statements (see `StatementPool`); `fenced()` uses the DataSource's. */
  readonly statements: StatementPool;

  constructor(
    source: DataSource | LeaseDataSourceRef,
    private readonly options: EngineSettings,
  ) {
    if (isDataSourceRef(source)) this.ref = source;
    else this.dataSource = source;
    // Behind a transaction pooler a session keeps no settings: every statement frames its own bounds there.
    this.statements = new StatementPool(() => this.sessionConfig('statements'), {
      max: options.poolSize,
      connectTimeoutMs: connectBoundMs(options),
      bounds: options.pooler === 'transaction' ? undefined : { boundMs: statementPoolBoundMs(options) },
    });
  }

  /** Resolves the DataSource, checks that it is PostgreSQL, and initializes it if nobody has. */
  async open(): Promise<void> {
    const dataSource = (this.dataSource ??= await this.ref!.resolve());
    if (dataSource.options.type !== 'postgres') {
      throw notPostgres(dataSource.options.type, 'give LeaseModule (or LeaseService) a PostgreSQL DataSource');
    }
    if (!dataSource.isInitialized) await dataSource.initialize();
    // `fenced()` checks out the application's connections: a failover must not end the process through one of them.
    listenToNewClients(this.pgPool());
  }

  /**
   * Runs `work` in a transaction of the application's DataSource that `opening` opens: BEGIN and the opening in one
   * round trip — one exchange of prepared statements (`exchange.ts`) when the opening has a name and the connection is
   * `pg`'s own, else `BEGIN; <opening>` in one simple-query message with its values written in as literals — `work`
   * given the manager and the opening's rows. `work` may hand back a `closing` statement: it travels with the COMMIT,
   * the same way. TypeORM is told of the transaction (`typeorm-transaction.ts`): the work's saves open none of their
   * own, a nested `manager.transaction()` is a savepoint, an error of the work rolls it all back. An error of the
   * opening goes through `openingFailed`, the work not run. Getting the connection is bounded (`connectBoundMs`): a
   * connection that arrives after the caller gave up is given back unused.
   */
  async transaction<T>(
    opening: () => BoundStatement,
    work: (
      manager: EntityManager,
      opened: Array<Record<string, unknown>>,
    ) => Promise<{ result: T; closing?: BoundStatement }>,
    openingFailed: (error: unknown) => unknown = (error) => error,
  ): Promise<T> {
    const runner = this.requireDataSource().createQueryRunner();
    const boundMs = connectBoundMs(this.options);
    let late = false;
    const giveUp = () => {
      late = true;
      return new Error(`nest-pg-lease: no connection of the DataSource within ${boundMs} ms (connection timeout)`);
    };
    let client: pg.ClientBase;
    try {
      // A connection arriving after the bound is released by the discard callback; releasing earlier would leave it
      // checked out for ever. `PostgresQueryRunner.connect()` resolves with its pg client (typed `any` there).
      client = await settleBy<pg.ClientBase>(runner.connect(), performance.now() + boundMs, undefined, giveUp, () => {
        void runner.release().catch(() => undefined);
      });
    } catch (error) {
      if (!late) await runner.release().catch(() => undefined);
      throw error;
    }
    try {
      // Told before BEGIN is sent: whatever fails from here on (the opening too, its BEGIN having run) is rolled back
      // below, and the connection never goes back to the pool inside a transaction.
      adoptOpenedTransaction(runner);
      let opened: Array<Record<string, unknown>>;
      try {
        opened = (await together(client, [{ text: this.begin() }, opening()]))[1];
      } catch (error) {
        throw openingFailed(error);
      }
      const { result, closing } = await work(runner.manager, opened);
      if (closing === undefined) {
        await runner.commitTransaction();
      } else {
        // If `closing` fails, COMMIT does not run (the rest of the message is skipped): rolled back below.
        await together(client, [closing, { text: 'COMMIT' }]);
        adoptCommittedTransaction(runner);
      }
      return result;
    } catch (error) {
      if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
      throw error;
    } finally {
      await runner.release().catch(() => undefined);
    }
  }

  /** The BEGIN of a fenced transaction: the DataSource's own `isolationLevel` if set, as TypeORM's would. */
  private begin(): string {
    const level = this.requireDataSource().options.isolationLevel;
    if (level === undefined) return 'BEGIN';
    if (!ISOLATION_LEVELS.has(level)) {
      throw new LeaseConfigError(messages.isolationLevelUnknown(String(level)));
    }
    return `BEGIN ISOLATION LEVEL ${level}`;
  }

  /**
   * The configuration of the library's own connections. The statement pool connects like the application's pool
   * (through its pooler, if any). The heartbeat, waiter-heartbeat and LISTEN connections use `sessionUrl` when given
   * (outside a transaction pooler, so renewals never wait for its server connections and LISTEN delivers), else the
   * application's pool settings.
   */
  sessionConfig(role: SessionRole): pg.ClientConfig {
    const { sessionUrl } = this.options;
    if (sessionUrl && role !== 'statements') {
      return { connectionString: sessionUrl, application_name: `nest-pg-lease:${role}` };
    }
    // pg's own resolved settings (URL, host, credentials, ssl, TypeORM's `extra`): exactly what the pool connects with.
    const { max, min, idleTimeoutMillis, ...config } = this.pgPool().options;
    void [max, min, idleTimeoutMillis]; // pool sizing, meaningless for one connection
    return { ...config, application_name: `${config.application_name ?? 'nest-pg-lease'}:${role}` };
  }

  /**
   * Closes the statement pool, then destroys the DataSource if the module created it. Bounded: a network that does
   * not answer costs at most two close steps.
   */
  async close(): Promise<void> {
    const stepMs = closeStepMs(this.options);
    await this.statements.end(stepMs);
    if (!this.ref) return;
    const giveUp = () => new Error(`the DataSource was not destroyed within ${stepMs} ms`);
    await settleBy(this.ref.close(), performance.now() + stepMs, undefined, giveUp);
  }

  private requireDataSource(): DataSource {
    if (!this.dataSource) {
      throw new LeaseConfigError(messages.serviceNotInitialized());
    }
    return this.dataSource;
  }

  /**
   * `PostgresDriver.master` is TypeORM's public handle on the pool (typed `any` there); `open()` checked that the
   * driver is the PostgreSQL one.
   */
  private pgPool(): pg.Pool {
    const driver = this.requireDataSource().driver as PostgresDriver;
    const pool = driver.master as pg.Pool | undefined;
    if (!pool) {
      throw new LeaseConfigError(messages.dataSourceNotInitialized());
    }
    return pool;
  }
}
