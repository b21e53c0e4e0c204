/**
 * What the end-to-end tests observe of a `LeaseService`'s engine beyond its public API, through named helpers rather
 * than private fields (which a rename would silently turn into `undefined` checks).
 */
import { engineOf } from './engine-of.js';
import type { LeaseEngine } from './engine/lease-engine.js';
import type { HeadWakeup } from './engine/wait-queue.js';
import type { LeaseService } from './lease.service.js';
import type { StatementFaults } from './store/sql/statement-faults.js';

/** The PostgreSQL engine of a service (these probes are about its heartbeat, its queue and its purge). */
const pgEngineOf = (service: LeaseService) => engineOf(service) as LeaseEngine;

/** Whether the service's lease heartbeat is running (it stops at its first tick with no lease held, and at close). */
export function heartbeatRunning(service: LeaseService): boolean {
  return pgEngineOf(service).heartbeat.running;
}

/** How many calls of `targetKey` wait for another run's outcome (`onBusy: 'join'`) in this service now. */
export function joinersWaiting(service: LeaseService, targetKey: string): number {
  return pgEngineOf(service).joinersOf(targetKey);
}

/**
 * Replaces what a head-only NOTIFY does to the waiter it names (by default: `wakeup.deliver()`, which wakes it, or
 * gives it the grant the NOTIFY carries): a test can drop the wake-up to show that the poll covers a lost
 * notification, or hold it back and deliver it later.
 */
export function interceptHeadWakeups(service: LeaseService, onHead: (wakeup: HeadWakeup) => void): void {
  pgEngineOf(service).queue.onHead = onHead;
}

/** Sets the park window of `service` (`PARK_WINDOW_MS`: a parked place's wait for a call, see engine/parked-places.ts). */
export function useParkWindow(service: LeaseService, ms: number): void {
  pgEngineOf(service).queue.parked.windowMs = ms;
}

/** Runs the engine's purge of free rows now (it runs by itself every `PURGE_INTERVAL_MS`); the count deleted. */
export function purgeFreeRows(service: LeaseService): Promise<number | null> {
  return pgEngineOf(service).purges.now();
}

/**
 * Builds the service's statements with `faults` (the fault schedule's negative controls re-introduce a defect the
 * schedule must catch, see store/sql/statement-faults.ts): the store's own setting, given to the SQL builders as an
 * argument. Call it before the service's first acquisition.
 */
export function useStatementFaults(service: LeaseService, faults: StatementFaults): void {
  pgEngineOf(service).backend.useStatementFaults?.(faults);
}

/**
 * The service's lease renewals stop reaching the database, as when its heartbeat is frozen or cut off (a paused
 * process, a partition): each renewal waits, unsent, until `resume()` sends it. Its leases' rows expire by their own
 * lease length, and the holder gives them up at its local deadline. The backend's other statements go on.
 */
export function pauseRenewals(service: LeaseService): { resume(): void } {
  const { backend } = pgEngineOf(service);
  const renew = backend.renew.bind(backend);
  let resume!: () => void;
  const resumed = new Promise<void>((resolve) => (resume = resolve));
  backend.renew = (...args) => resumed.then(() => renew(...args));
  return {
    resume: () => {
      backend.renew = renew;
      resume();
    },
  };
}
