import type { ServiceEngine } from '../engine/service-engine.js';
import type { ElectOptions } from '../interfaces/leader-election.interface.js';
import { LeaderCandidate } from './leader-candidate.js';

/** Each engine's running candidates (elect(), @LeaderElection, @Sticky), stopped together at shutdown. */
const running = new WeakMap<ServiceEngine, Set<LeaderCandidate>>();
/** Each engine's sticky owners, by key: one candidate per key, made by the first call. */
const sticky = new WeakMap<ServiceEngine, Map<string, LeaderCandidate>>();

/** Engines whose candidates were stopped (shutdown began): no sticky owner starts again. */
const stopped = new WeakSet<ServiceEngine>();

/** Starts a candidate and keeps it in its engine's set until its loop ends. */
export function startCandidate(engine: ServiceEngine, targetKey: string, options: ElectOptions): LeaderCandidate {
  let set = running.get(engine);
  if (!set) running.set(engine, (set = new Set()));
  const candidate = new LeaderCandidate(engine, targetKey, options);
  set.add(candidate);
  void candidate.ended.then(() => set.delete(candidate));
  return candidate;
}

/**
 * Stops every candidate of `engine` at once: leaders release their leases (graceful hand-over), except a sticky owner
 * whose call is in progress: it keeps its term until the call ends (or the drain's grace does).
 */
export async function stopCandidates(engine: ServiceEngine): Promise<void> {
  stopped.add(engine);
  sticky.delete(engine);
  await Promise.all([...(running.get(engine) ?? [])].map((candidate) => candidate.stop()));
}

/**
 * `close()` of a service with its candidates (`LeaseService.close()`, the leader explorer at shutdown): the engine's
 * close (new calls refused, the drain) and the candidates' stop side by side — a leader hands over at once instead of
 * holding its idle term through the drain, and a sticky call in progress drains like any other call.
 */
export async function closeWithCandidates(engine: ServiceEngine): Promise<void> {
  await Promise.all([stopCandidates(engine), engine.close()]);
}

/**
 * The sticky owner candidate of `targetKey` in `engine` (started by the first call, in line until shutdown);
 * undefined once shutdown began.
 */
export function stickyCandidate(
  engine: ServiceEngine,
  targetKey: string,
  options: Pick<ElectOptions, 'priority' | 'keyTemplate'>,
): LeaderCandidate | undefined {
  if (stopped.has(engine)) return undefined;
  let byKey = sticky.get(engine);
  if (!byKey) sticky.set(engine, (byKey = new Map()));
  let candidate = byKey.get(targetKey);
  if (!candidate) byKey.set(targetKey, (candidate = startCandidate(engine, targetKey, options)));
  return candidate;
}

/** One election this process takes part in, as the operator's console shows it. */
export interface ElectionView {
  readonly targetKey: string;
  /** A `@Sticky` owner's election (its term carries the decorated calls), not `elect()` / `@LeaderElection`. */
  readonly sticky: boolean;
  /** This process leads it now. */
  readonly leading: boolean;
}

/**
 * The elections of `engine`'s running candidates, one per key (`elect()`, `@LeaderElection`, `@Sticky`): which keys
 * are leader keys is known only to the processes that elect on them (a lease row does not say it).
 */
export function electionsOf(engine: ServiceEngine): ElectionView[] {
  const stickyKeys = new Set(sticky.get(engine)?.keys() ?? []);
  const byKey = new Map<string, ElectionView>();
  for (const candidate of running.get(engine) ?? []) {
    const known = byKey.get(candidate.targetKey);
    byKey.set(candidate.targetKey, {
      targetKey: candidate.targetKey,
      sticky: stickyKeys.has(candidate.targetKey),
      leading: (known?.leading ?? false) || candidate.isLeader,
    });
  }
  return [...byKey.values()].sort((a, b) => a.targetKey.localeCompare(b.targetKey));
}
