import type { ModuleRef } from '@nestjs/core';
import { getDataSourceToken } from '@nestjs/typeorm';
import type pg from 'pg';
import { DataSource, type EntityManager } from 'typeorm';
import type { PostgresDriver } from 'typeorm/driver/postgres/PostgresDriver.js';
import { LeaseConfigError } from './errors.js';
import type { LeaseModuleOptions, ResolvedLeaseOptions } from './lease.options.js';
import type { PoolLike } from './lease-store.js';

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
export type SessionRole = 'heartbeat' | 'waiters' | 'listen';

function notPostgres(type: unknown, advice: string): LeaseConfigError {
  return new LeaseConfigError(
    `nest-pg-lease needs a PostgreSQL DataSource (type "postgres"), got "${String(type)}": ${advice}`,
  );
}

/**
 * Resolves the DataSource in `onModuleInit`, when every provider of every module exists: the app's default
 * `@nestjs/typeorm` DataSource, a named one (`dataSourceName`), or one made from `options.dataSource` and owned.
 */
export class ModuleDataSourceRef implements LeaseDataSourceRef {
  private owned?: DataSource;

  constructor(
    private readonly options: LeaseModuleOptions,
    private readonly moduleRef: ModuleRef,
  ) {}

  async resolve(): Promise<DataSource> {
    if (this.options.dataSource) {
      if (this.options.dataSourceName) {
        throw new LeaseConfigError(
          'Give either dataSource (the module creates its own) or dataSourceName (reuse one), not both',
        );
      }
      // Before the DataSource exists: TypeORM loads the driver package in its constructor, and a user who asked for
      // another database would only hear "install mysql2".
      if (this.options.dataSource.type !== 'postgres') {
        throw notPostgres(this.options.dataSource.type, "set dataSource.type to 'postgres'");
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
        `No TypeORM DataSource ${named ? `named "${named}"` : '(default)'} found: import ` +
          `TypeOrmModule.forRoot(...)${named ? ` with name "${named}"` : ''}, or pass dataSource options to ` +
          'LeaseModule.forRoot() so it creates its own',
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
 * the PostgreSQL check, the `pg` pool under it, the connection settings of the library's own connections, and
 * transactions. The rest of the library sees a pool (`PoolLike`) and `EntityManager`s.
 */
export class LeaseDatabase {
  private dataSource?: DataSource;
  private readonly ref?: LeaseDataSourceRef;

  constructor(
    source: DataSource | LeaseDataSourceRef,
    private readonly options: ResolvedLeaseOptions,
  ) {
    if (isDataSourceRef(source)) this.ref = source;
    else this.dataSource = source;
  }

  /** Resolves the DataSource, checks that it is PostgreSQL, and initializes it if nobody has. */
  async open(): Promise<void> {
    const dataSource = (this.dataSource ??= await this.ref!.resolve());
    if (dataSource.options.type !== 'postgres') {
      throw notPostgres(dataSource.options.type, 'give LeaseModule (or LeaseService) a PostgreSQL DataSource');
    }
    if (!dataSource.isInitialized) await dataSource.initialize();
  }

  /** The application's pool, resolved at each call (the DataSource exists only after `open()`). */
  readonly pool: PoolLike = {
    query: (config) => this.pgPool().query(config),
    connect: () => this.pgPool().connect(),
  };

  /** Runs `work` in a transaction of the application's DataSource. */
  transaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    return this.requireDataSource().transaction(work);
  }

  /**
   * The heartbeat, waiter-heartbeat and LISTEN connections: `sessionUrl` when given (outside a transaction pooler, so
   * renewals never wait for its server connections and LISTEN delivers), else the application's pool settings.
   */
  sessionConfig(role: SessionRole): pg.ClientConfig {
    const { sessionUrl } = this.options;
    if (sessionUrl) return { connectionString: sessionUrl, application_name: `nest-pg-lease:${role}` };
    // pg's own resolved settings (URL, host, credentials, ssl, TypeORM's `extra`): exactly what the pool connects with.
    const { max, min, idleTimeoutMillis, ...config } = this.pgPool().options;
    void [max, min, idleTimeoutMillis]; // pool sizing, meaningless for one connection
    return { ...config, application_name: `${config.application_name ?? 'nest-pg-lease'}:${role}` };
  }

  /** Destroys the DataSource if the module created it. */
  async close(): Promise<void> {
    await this.ref?.close();
  }

  private requireDataSource(): DataSource {
    if (!this.dataSource) {
      throw new LeaseConfigError('LeaseService is not initialized: call init() (Nest does it at bootstrap) first');
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
      throw new LeaseConfigError(
        'The DataSource is not initialized: initialize it (or let Nest do it) before using leases',
      );
    }
    return pool;
  }
}
