/**
 * The busy policies in the type: the combinations that make no sense do not compile (each `@ts-expect-error` below
 * fails the type check — `npm run typecheck`, part of `npm run lint` — once its line compiles), and the same input
 * from JavaScript is refused at run time. Each refused call stays on one line, right after its comment.
 */
import type { DataSource } from 'typeorm';
import { LeaseArgumentError, LeaseConfigError } from './errors/lease.errors.js';
import { Exclusive } from './exclusive/exclusive.decorator.js';
import { Sticky } from './exclusive/sticky.decorator.js';
import type { AcquireOptions, RunOptions, TryAcquireOptions } from './interfaces/acquire-options.interface.js';
import type { BusyPolicy } from './interfaces/busy-policy.interface.js';
import type { ExclusiveOptions, StickyOptions } from './interfaces/exclusive-options.interface.js';
import type { LeaseModuleOptions } from './interfaces/lease-module-options.interface.js';
import { LeaseService } from './lease.service.js';
import { acquireCall, runCall, tryAcquireRequest } from './options/busy-policy.js';
import { resolveLeaseOptions } from './options/resolve-lease-options.js';

const work = () => Promise.resolve();

/** What compiles: every policy where it makes sense. Never called: the compiler is the test. */
export function compiles(leases: LeaseService, dataSource: DataSource): void {
  void leases.run('k', work, { onBusy: 'throw' });
  void leases.run('k', work, { priority: 3, onBusy: { wait: { timeoutMs: 5 } } });
  void leases.run('k', work, { onBusy: { join: { timeoutMs: 5 } } });
  void leases.run('k', work, { limit: 1, onBusy: 'join' });
  void leases.run('k', work, { onBusy: { preempt: { graceMs: 0, waitTimeoutMs: 5 } } });
  void leases.run('k', work, { limit: 4, onBusy: 'wait' });
  void leases.acquire('k', { onBusy: 'preempt' });
  void leases.acquire('k', { limit: 4, onBusy: { wait: {} } });
  void leases.tryAcquire('k', { priority: 1, limit: 4 });
  const policy: BusyPolicy = 'skip';
  const options: ExclusiveOptions = { onBusy: policy };
  const sticky: StickyOptions = { priority: 2, onBusy: { wait: { timeoutMs: 5 } } };
  void [options, sticky, Exclusive('k', 5), Sticky('k', sticky)];
  void new LeaseService(dataSource, { timing: { heartbeatIntervalMs: 5 }, owner: 'me' });
}

/** What does not compile: each line after a `@ts-expect-error`. Never called. */
export function refused(leases: LeaseService): void {
  // @ts-expect-error a semaphore (limit above 1) cannot join: its key has several holders
  void leases.run('k', work, { limit: 4, onBusy: 'join' });
  // @ts-expect-error a semaphore cannot preempt
  void leases.run('k', work, { limit: 4, onBusy: { preempt: {} } });
  // @ts-expect-error a semaphore's acquire cannot preempt either
  void leases.acquire('k', { limit: 4, onBusy: 'preempt' });
  // @ts-expect-error tryAcquire never waits: it has no busy policy
  void leases.tryAcquire('k', { onBusy: 'wait' });
  // @ts-expect-error acquire waits by definition
  void leases.acquire('k', { onBusy: 'throw' });
  // @ts-expect-error acquire cannot join (it returns a lease, not a run's value)
  void leases.acquire('k', { onBusy: 'join' });
  // @ts-expect-error skip is a decorated method's: run needs a value
  void leases.run('k', work, { onBusy: 'skip' });
  // @ts-expect-error the flag era's name: onBusy: { wait: { timeoutMs } }
  void leases.run('k', work, { waitTimeoutMs: 5 });
  // @ts-expect-error the flag era's name: onBusy: 'preempt'
  void leases.acquire('k', { preempt: true });
  // @ts-expect-error one policy per call
  void leases.run('k', work, { onBusy: { wait: {}, join: {} } });
  // @ts-expect-error a policy's own fields only
  void leases.run('k', work, { onBusy: { wait: { graceMs: 5 } } });
  // @ts-expect-error a semaphore @Exclusive cannot join
  void Exclusive('k', { limit: 4, onBusy: 'join' });
  // @ts-expect-error sticky is a decorator of its own: @Sticky
  void Exclusive('k', { sticky: true });
  // @ts-expect-error @Exclusive names its calls by its key template
  void Exclusive('k', { keyTemplate: 't' });
  // @ts-expect-error a sticky owner keeps one lease: no limit
  void Sticky('k', { limit: 2 });
  // @ts-expect-error a sticky owner keeps its lease across calls: no hold
  void Sticky('k', { holdAtLeastMs: 5 });
  // @ts-expect-error a sticky call neither joins nor preempts
  void Sticky('k', { onBusy: 'join' });
}

/** Module options are grouped: a flat field does not compile. Never called. */
export function refusedModuleOptions(dataSource: DataSource): void {
  // @ts-expect-error timing.heartbeatIntervalMs
  void new LeaseService(dataSource, { heartbeatIntervalMs: 5 });
  // @ts-expect-error a field of another group: connections.poolSize
  void new LeaseService(dataSource, { timing: { poolSize: 5 } });
}

const thrown = (check: () => unknown): unknown => {
  try {
    check();
    return undefined;
  } catch (error) {
    return error;
  }
};

describe('the same combinations from JavaScript are refused at run time', () => {
  it.each<[string, () => unknown]>([
    ['a joining semaphore', () => runCall('k', { limit: 4, onBusy: 'join' } as unknown as RunOptions)],
    ['a preempting semaphore', () => runCall('k', { limit: 4, onBusy: { preempt: {} } } as unknown as RunOptions)],
    ['a waiting tryAcquire', () => tryAcquireRequest('k', { onBusy: 'wait' } as TryAcquireOptions)],
    ['a throwing acquire', () => acquireCall('k', { onBusy: 'throw' } as unknown as AcquireOptions)],
    ['a skipping run', () => runCall('k', { onBusy: 'skip' } as unknown as RunOptions)],
    ['the old waitTimeoutMs', () => runCall('k', { waitTimeoutMs: 5 } as RunOptions)],
    ['two policies', () => runCall('k', { onBusy: { wait: {}, join: {} } } as unknown as RunOptions)],
  ])('%s: LeaseArgumentError per call', (_, check) => {
    expect(thrown(check)).toBeInstanceOf(LeaseArgumentError);
  });

  it.each<[string, () => unknown]>([
    ['a joining semaphore', () => Exclusive('k', { limit: 4, onBusy: 'join' } as unknown as ExclusiveOptions)],
    ['sticky', () => Exclusive('k', { sticky: true } as ExclusiveOptions)],
    ['a sticky limit', () => Sticky('k', { limit: 2 } as StickyOptions)],
    ['a sticky join', () => Sticky('k', { onBusy: 'join' } as unknown as StickyOptions)],
  ])('%s: LeaseConfigError at decoration', (_, check) => {
    expect(thrown(check)).toBeInstanceOf(LeaseConfigError);
  });

  it('a flat module option: LeaseConfigError naming its group', () => {
    expect(() => resolveLeaseOptions({ heartbeatIntervalMs: 5 } as LeaseModuleOptions)).toThrow(
      'Unknown LeaseModule option "heartbeatIntervalMs": did you mean "timing.heartbeatIntervalMs"?',
    );
    expect(() => resolveLeaseOptions({ timing: { poolSize: 5 } } as LeaseModuleOptions)).toThrow(
      /"timing\.poolSize": did you mean "connections\.poolSize"\?/,
    );
  });
});
