/**
 * The one way tests, test workers and benchmarks open a LeaseService of their own: its own DataSource, the options
 * given (no defaults added here — the suites add their fast test timings, the benchmarks their own), then `init()`:
 * the standalone use docs/lease-service.md documents. No Jest in here, so `tsx` scripts (bench/) import it too.
 */
import { LeaseService, leaseEntities, type LeaseModuleOptions } from 'nest-pg-lease';
import { DataSource } from 'typeorm';

export interface DataSourceShape {
  /** Pool size of the DataSource (its `extra.max`). @default 10 */
  poolSize?: number;
  /** Entities of the DataSource. @default leaseEntities */
  entities?: unknown[];
  /** `application_name` of its pooled connections (how the database tells "processes" apart); unset by default. */
  applicationName?: string;
  /** More `pg` pool settings of the DataSource (its `extra`), e.g. `{ pipeline: true }`. */
  extra?: Record<string, unknown>;
}

export function makeDataSource(url: string, shape: DataSourceShape = {}): DataSource {
  return new DataSource({
    type: 'postgres',
    url,
    entities: (shape.entities as never) ?? [...leaseEntities],
    extra: {
      max: shape.poolSize ?? 10,
      ...(shape.applicationName === undefined ? {} : { application_name: shape.applicationName }),
      ...shape.extra,
    },
  });
}

/** A LeaseService of its own, with its DataSource, and how to close both. */
export interface OpenedService {
  readonly service: LeaseService;
  readonly dataSource: DataSource;
  close(): Promise<void>;
}

/** Opens a DataSource and a LeaseService on it with exactly `options`; `close()` closes the service, then the DataSource. */
export async function openService(
  url: string,
  options: LeaseModuleOptions,
  shape: DataSourceShape = {},
): Promise<OpenedService> {
  const dataSource = makeDataSource(url, shape);
  await dataSource.initialize();
  const service = new LeaseService(dataSource, options);
  try {
    await service.init();
  } catch (error) {
    await dataSource.destroy().catch(() => undefined);
    throw error;
  }
  return {
    service,
    dataSource,
    close: async () => {
      await service.close();
      if (dataSource.isInitialized) await dataSource.destroy();
    },
  };
}
