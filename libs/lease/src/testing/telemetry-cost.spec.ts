import diagnostics from 'node:diagnostics_channel';
import { jest } from '@jest/globals';
import { LEASE_CHANNELS } from '../lease.constants.js';
import { MemoryLeases } from './memory-leases.js';
import type { LeaseEvent } from '../interfaces/lease-event.interface.js';
import type { LeaseTelemetry } from '../engine/lease-telemetry.js';

/**
 * What a call pays for its telemetry: nothing when no SDK records spans and nobody hears `acquire-ended` (no
 * `events$` subscriber, no subscriber of its diagnostics channel) — the engine does not even call the telemetry.
 */
describe('telemetry of an acquisition, paid only when someone listens', () => {
  let leases: MemoryLeases;
  let acquire: jest.SpiedFunction<LeaseTelemetry['acquire']>;

  beforeEach(async () => {
    // The engine over the memory backend, as the testing kit builds it.
    leases = new MemoryLeases({});
    await leases.engine.init();
    const telemetry = (leases.engine as unknown as { telemetry: LeaseTelemetry }).telemetry;
    acquire = jest.spyOn(telemetry, 'acquire');
  });
  afterEach(() => leases.engine.close());

  const cycle = async (key: string) => (await leases.engine.tryAcquire(request(key)))?.release();

  it('makes no telemetry call and builds no event for nobody', async () => {
    await cycle('quiet:1');
    expect(acquire).not.toHaveBeenCalled();
  });

  it('times the call for an events$ subscriber', async () => {
    const seen: LeaseEvent[] = [];
    const subscription = leases.engine.events$.subscribe((event) => seen.push(event));
    await cycle('heard:1');
    subscription.unsubscribe();
    expect(acquire).toHaveBeenCalledTimes(1);
    expect(seen.map((event) => event.type)).toContain('acquire-ended');
  });

  it('times the call for a subscriber of the acquire-ended channel', async () => {
    const seen: unknown[] = [];
    const listen = (message: unknown) => seen.push(message);
    diagnostics.subscribe(LEASE_CHANNELS['acquire-ended'], listen);
    try {
      await cycle('channel:1');
    } finally {
      diagnostics.unsubscribe(LEASE_CHANNELS['acquire-ended'], listen);
    }
    expect(seen).toEqual([expect.objectContaining({ type: 'acquire-ended', outcome: 'acquired' })]);
  });
});

/**
 * Lease events are built only for someone: a grant, a refusal, a renewal and a release with nobody listening hand the
 * engine's `emit` nothing; one listener of one channel gets its own type only.
 */
describe('lease events, built only when someone listens', () => {
  let leases: MemoryLeases;
  let emit: jest.SpiedFunction<(event: LeaseEvent) => void>;

  beforeEach(async () => {
    leases = new MemoryLeases({});
    await leases.engine.init();
    emit = jest.spyOn(leases.engine, 'emit');
  });
  afterEach(() => leases.engine.close());

  const lifetime = async (key: string) => {
    const lease = await leases.engine.tryAcquire(request(key));
    expect(await leases.engine.tryAcquire(request(key))).toBeNull();
    await leases.engine.renewNow();
    await lease?.release();
  };

  it('emits nothing for nobody', async () => {
    await lifetime('quiet:2');
    expect(emit).not.toHaveBeenCalled();
  });

  it("emits each type for its channel's subscriber only, and everything for an events$ subscriber", async () => {
    const seen: unknown[] = [];
    const listen = (message: unknown) => seen.push(message);
    diagnostics.subscribe(LEASE_CHANNELS.released, listen);
    try {
      await lifetime('channel:2');
    } finally {
      diagnostics.unsubscribe(LEASE_CHANNELS.released, listen);
    }
    expect(emit.mock.calls.map(([event]) => event.type)).toEqual(['released']);
    expect(seen).toEqual([expect.objectContaining({ type: 'released', targetKey: 'channel:2' })]);
    emit.mockClear();
    const subscription = leases.engine.events$.subscribe(() => undefined);
    await lifetime('heard:2');
    subscription.unsubscribe();
    expect(emit.mock.calls.map(([event]) => event.type)).toEqual([
      'acquired',
      'acquire-ended',
      'busy',
      'acquire-ended',
      'renewed',
      'released',
    ]);
  });
});

function request(targetKey: string) {
  return { targetKey, priority: 0, holdMs: 0, keyTemplate: targetKey, limit: 1 };
}
