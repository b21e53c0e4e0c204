/**
 * Each `LeaseService`'s engine, kept off the class so that its `.d.ts` shows the documented members and nothing else.
 * Private: the doors, the integrations' tests and `internal.ts` reach the engine through `engineOf`.
 */
import type { ServiceEngine } from './engine/service-engine.js';

/** Keyed by the service (typed `object` here: lease.service.ts imports this file, not the other way round). */
const engines = new WeakMap<object, ServiceEngine>();

/** Binds a service to its engine (its constructor does). */
export function bindEngine(service: object, engine: ServiceEngine): void {
  engines.set(service, engine);
}

/** The engine behind a `LeaseService`: what the doors (`@Exclusive`, the explorer) use. */
export function engineOf(service: object): ServiceEngine {
  const engine = engines.get(service);
  if (!engine) throw new TypeError('not a LeaseService');
  return engine;
}
