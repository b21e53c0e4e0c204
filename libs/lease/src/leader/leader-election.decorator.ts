import 'reflect-metadata';
import { LeaseConfigError, LeaseError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import { LEADER_METADATA } from '../lease.internal-constants.js';
import type { LeaderElectionOptions } from '../interfaces/leader-election.interface.js';
import { checkElection } from './elect.js';

/**
 * Makes the provider a candidate for leadership of `targetKey` in every instance of the application: at bootstrap
 * (after every `onModuleInit`) it enters the key's priority line; when elected, its `onElected(lease)` method is
 * called; when the term ends (lease lost, or shutdown: released at once, before the other shutdown hooks' work),
 * `onRevoked(reason)`. Singleton providers only.
 *
 * @example @LeaderElection('orders:consumer', { priority: 10 }) class OrdersConsumer { onElected(lease) {…} }
 */
export function LeaderElection(targetKey: string, options: LeaderElectionOptions = {}): ClassDecorator {
  return (target) => {
    try {
      checkElection(targetKey, options, '@LeaderElection');
    } catch (error) {
      if (!(error instanceof LeaseError)) throw error;
      throw new LeaseConfigError(messages.leaderDeclared(target.name, error.message));
    }
    Reflect.defineMetadata(LEADER_METADATA, { targetKey, ...options }, target);
  };
}
