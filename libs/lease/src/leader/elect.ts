import type { ElectOptions } from '../interfaces/leader-election.interface.js';
import { checkElectionKeys } from '../options/busy-policy.js';
import { assertPriority, assertTargetKey, keyTemplateOf } from '../options/call-input.js';
import type { LeaderCandidates } from './candidates.js';
import type { LeaderCandidate } from './leader-candidate.js';

/** `LeaseService.elect`: checks the input (a `LeaseArgumentError`, nothing written), then starts a candidate. */
export function elect(candidates: LeaderCandidates, targetKey: string, options: ElectOptions = {}): LeaderCandidate {
  checkElection(targetKey, options, 'elect()');
  return candidates.start(targetKey, options);
}

/** What `elect()` and `@LeaderElection` accept (`LeaseArgumentError` / `LeaseKeyError` otherwise). */
export function checkElection(
  targetKey: unknown,
  options: ElectOptions,
  door: 'elect()' | '@LeaderElection',
): asserts targetKey is string {
  checkElectionKeys(door, options);
  assertTargetKey(targetKey);
  if (options.priority !== undefined) assertPriority(options.priority);
  if (options.keyTemplate !== undefined) keyTemplateOf(options.keyTemplate);
}
