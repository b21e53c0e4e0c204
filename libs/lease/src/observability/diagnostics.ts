/**
 * Every lease event on `node:diagnostics_channel`, one channel per event type (`LEASE_CHANNELS`). A channel nobody
 * subscribes to costs one property read per event: nothing is built or published.
 */
import diagnostics from 'node:diagnostics_channel';
import type { LeaseEvent, LeaseEventType } from '../interfaces/lease-event.interface.js';
import { LEASE_CHANNELS } from '../lease.constants.js';

const channels = new Map<LeaseEventType, diagnostics.Channel>();

/** Publishes `event` on its channel when someone subscribes. */
export function publish(event: LeaseEvent): void {
  let channel = channels.get(event.type);
  if (!channel) channels.set(event.type, (channel = diagnostics.channel(LEASE_CHANNELS[event.type])));
  if (channel.hasSubscribers) channel.publish(event);
}
