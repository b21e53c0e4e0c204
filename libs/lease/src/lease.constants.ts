import type { LeaseEventType } from './interfaces/lease-event.interface.js';

/** The longest target key, in bytes of UTF-8 (the lease row's CHECK constraint says the same). */
export const MAX_TARGET_KEY_BYTES = 255;

/**
 * The `node:diagnostics_channel` names of the lease events: every event of `LeaseService.events$` (of every
 * LeaseService of the process) is also published, as the same object, on the channel of its type. Nothing is
 * published on a channel nobody subscribes to.
 *
 * @example diagnostics_channel.subscribe(LEASE_CHANNELS.lost, (event) => …)
 */
export const LEASE_CHANNELS: Readonly<Record<LeaseEventType, string>> = Object.freeze({
  acquired: 'nest-pg-lease:acquired',
  'taken-over': 'nest-pg-lease:taken-over',
  renewed: 'nest-pg-lease:renewed',
  'renew-failed': 'nest-pg-lease:renew-failed',
  lost: 'nest-pg-lease:lost',
  released: 'nest-pg-lease:released',
  busy: 'nest-pg-lease:busy',
  waiting: 'nest-pg-lease:waiting',
  'wait-ended': 'nest-pg-lease:wait-ended',
  preempted: 'nest-pg-lease:preempted',
  'acquire-ended': 'nest-pg-lease:acquire-ended',
  elected: 'nest-pg-lease:elected',
  revoked: 'nest-pg-lease:revoked',
});
