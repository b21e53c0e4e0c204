/**
 * The testing kit's leases: the library's one engine (`LeaseEngine`) over the memory backend — not a second engine —
 * so a unit test gets the waits, the drain, preemption, joins and semaphores of production by construction.
 */
import type { EntityManager } from 'typeorm';
import type { FencedTransaction } from '../core/memory/fenced-transaction.types.js';
import { MemoryBackend } from '../core/memory/memory-backend.js';
import { LeaseEngine } from '../engine/lease-engine.js';
import type { LeaseModuleOptions } from '../interfaces/lease-module-options.interface.js';

export type { FencedTransaction };

/** Options of the in-memory lease service: the module's (grouped) options, plus how `fenced()` runs its work. */
export interface LeaseTestingOptions extends LeaseModuleOptions {
  /**
   * Runs the work of every `lease.fenced(work)` that is allowed to write, e.g. `(work) => work(fakeManager)` or
   * `(work) => dataSource.transaction(work)`. @default runs the work with an EntityManager that throws on any use
   */
  fencedTransaction?: FencedTransaction;
}

/** What `fenced()` hands the work when the test gave no `fencedTransaction`: any use explains what to do. */
const NO_MANAGER = new Proxy({} as EntityManager, {
  get(_target, property) {
    if (property === 'then' || typeof property === 'symbol') return undefined;
    throw new TypeError(
      `lease.fenced(): the in-memory lease service has no database (EntityManager.${String(property)} was used); ` +
        'give LeaseTestingModule.forRoot({ fencedTransaction: (work) => work(yourManager) })',
    );
  },
});

/** An engine over the memory backend, and that backend (whose rows the test controls change). */
export class MemoryLeases {
  /** @internal (kept out of the kit's declarations: the engine's types reach the PostgreSQL backend's) */
  readonly engine: LeaseEngine;
  /** @internal */
  readonly backend: MemoryBackend;

  constructor(options: LeaseTestingOptions = {}) {
    const { fencedTransaction = (work) => work(NO_MANAGER), ...moduleOptions } = options;
    let backend: MemoryBackend | undefined;
    this.engine = new LeaseEngine(
      (settings) => (backend = new MemoryBackend(settings, fencedTransaction)),
      moduleOptions,
    );
    this.backend = backend!;
  }
}
