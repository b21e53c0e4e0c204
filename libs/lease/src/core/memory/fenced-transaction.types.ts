/**
 * How the memory backend runs a fenced write's work: the test's own transaction. A file of its own, importing nothing
 * of the library, so the testing kit's public declarations (`LeaseTestingOptions`) reach no backend's types — a
 * CommonJS consumer compiling them without `esModuleInterop` would meet the PostgreSQL backend's `pg` imports.
 */
import type { EntityManager } from 'typeorm';

/** Runs a fenced write's work in the test's transaction (`LeaseTestingOptions.fencedTransaction`). */
export type FencedTransaction = <T>(work: (manager: EntityManager) => Promise<T>) => Promise<T>;
