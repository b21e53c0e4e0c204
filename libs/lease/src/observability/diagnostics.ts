/**
 * Every lease event on `node:diagnostics_channel`, one channel per event type (`LEASE_CHANNELS`). A channel nobody
 * subscribes to costs one property read per event: nothing is built or published.
 */
import diagnostics from 'node:diagnostics_channel';
import type { LeaseEvent, LeaseEventType } from '../interfaces/lease-event.interface.js';
import { LEASE_CHANNELS } from '../lease.constants.js';

const channels = new Map<LeaseEventType, diagnostics.Channel>();

function channelOf(type: LeaseEventType): diagnostics.Channel {
  let channel = channels.get(type);
  if (!channel) channels.set(type, (channel = diagnostics.channel(LEASE_CHANNELS[type])));
  return channel;
}

/** Whether someone subscribes to the channel of `type` (so an event of it is worth building). */
export function channelHeard(type: LeaseEventType): boolean {
  return channelOf(type).hasSubscribers;
}

/** Publishes `event` on its channel when someone subscribes. */
export function publish(event: LeaseEvent): void {
  const channel = channelOf(event.type);
  if (channel.hasSubscribers) channel.publish(event);
}
