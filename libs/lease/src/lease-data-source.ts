import type { ModuleRef } from '@nestjs/core';
import { getDataSourceToken } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { LeaseConfigError } from './errors.js';
import type { LeaseModuleOptions } from './lease.options.js';

/** Where the lease service gets its DataSource: a given one, or one resolved (or created) at bootstrap. */
export interface LeaseDataSourceRef {
  resolve(): Promise<DataSource>;
  /** Destroys the DataSource if the module created it. */
  close(): Promise<void>;
}

export function isDataSourceRef(value: unknown): value is LeaseDataSourceRef {
  return typeof value === 'object' && value !== null && typeof (value as LeaseDataSourceRef).resolve === 'function' && !(value instanceof DataSource);
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
        throw new LeaseConfigError('Give either dataSource (the module creates its own) or dataSourceName (reuse one), not both');
      }
      // Before the DataSource exists: TypeORM loads the driver package in its constructor, and a user who asked for
      // another database would only hear "install mysql2".
      if (this.options.dataSource.type !== 'postgres') {
        throw new LeaseConfigError(
          `nest-pg-lease needs a PostgreSQL DataSource (type "postgres"), ` +
            `got "${String(this.options.dataSource.type)}": set dataSource.type to 'postgres'`,
        );
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
      const name = this.options.dataSourceName ? `named "${this.options.dataSourceName}"` : '(default)';
      throw new LeaseConfigError(
        `No TypeORM DataSource ${name} found: import TypeOrmModule.forRoot(...)${this.options.dataSourceName ? ` with name "${this.options.dataSourceName}"` : ''}, or pass dataSource options to LeaseModule.forRoot() so it creates its own`,
      );
    }
    return dataSource;
  }

  async close(): Promise<void> {
    if (this.owned?.isInitialized) await this.owned.destroy();
  }
}
