import { jest } from '@jest/globals';
import type { LeaseEvent } from '../interfaces/lease-event.interface.js';
import { LeaseTelemetry } from './lease-telemetry.js';

/** What a call pays for its telemetry: nothing when nobody records a span and nobody hears its timing event. */
describe('LeaseTelemetry', () => {
  const call = { targetKey: 'report:1', priority: 0, keyTemplate: 'report:{id}' };
  const backend = { snapshot: async () => [] };
  const track = <T>(work: Promise<T>) => work;

  it('builds no acquire-ended event and wraps nothing when nobody hears it (no SDK, no subscriber)', async () => {
    const emit = jest.fn<(event: LeaseEvent) => void>();
    const heard = jest.fn(() => false);
    const telemetry = new LeaseTelemetry({ traceTargetKeys: false }, backend, emit, track, heard);
    const work = Promise.resolve(null);
    // The work's own promise comes back: no `then` around it, no closure kept for its end.
    expect(telemetry.acquire(call, () => work)).toBe(work);
    await work;
    expect(emit).not.toHaveBeenCalled();
    expect(heard).toHaveBeenCalledWith('acquire-ended');
  });

  it('emits acquire-ended with the outcome when someone hears it', async () => {
    const emit = jest.fn<(event: LeaseEvent) => void>();
    const telemetry = new LeaseTelemetry({ traceTargetKeys: false }, backend, emit, track, () => true);
    await telemetry.acquire(call, async () => null);
    expect(emit).toHaveBeenCalledWith(
      expect.objectContaining({ type: 'acquire-ended', targetKey: 'report:1', outcome: 'busy' }),
    );
    await expect(telemetry.acquire(call, () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(emit).toHaveBeenLastCalledWith(expect.objectContaining({ type: 'acquire-ended', outcome: 'error' }));
  });
});
