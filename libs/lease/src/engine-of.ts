/**
 * Each `LeaseService`'s engine and leader candidates, kept off the class so that its `.d.ts` shows the documented
 * members and nothing else. Private: the doors, the integrations' tests and `internal.ts` reach them through
 * `engineOf` and `candidatesOf`.
 */
import type { ServiceEngine } from './engine/service-engine.js';
import type { LeaderCandidates } from './leader/candidates.js';

/** What a service stands for. */
interface ServiceParts {
  readonly engine: ServiceEngine;
  readonly candidates: LeaderCandidates;
}

/** Keyed by the service (typed `object` here: lease.service.ts imports this file, not the other way round). */
const services = new WeakMap<object, ServiceParts>();

/** Binds a service to its engine and candidates (its constructor does). */
export function bindEngine(service: object, engine: ServiceEngine, candidates: LeaderCandidates): void {
  services.set(service, { engine, candidates });
}

function partsOf(service: object): ServiceParts {
  const parts = services.get(service);
  if (!parts) throw new TypeError('not a LeaseService');
  return parts;
}

/** The engine behind a `LeaseService`: what the doors (`@Exclusive`, the explorer) use. */
export function engineOf(service: object): ServiceEngine {
  return partsOf(service).engine;
}

/** The leader candidates of a `LeaseService` (`elect()`, `@LeaderElection`, `@Sticky`; LeaseModule provides them). */
export function candidatesOf(service: object): LeaderCandidates {
  return partsOf(service).candidates;
}
