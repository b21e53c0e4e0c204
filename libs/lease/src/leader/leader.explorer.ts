import 'reflect-metadata';
import { type BeforeApplicationShutdown, Inject, Injectable, type OnApplicationBootstrap } from '@nestjs/common';
import { ModulesContainer } from '@nestjs/core';
import { LEADER_METADATA } from '../lease.internal-constants.js';
import type { LeaderElectionOptions, OnLeadership } from '../interfaces/leader-election.interface.js';
import { LeaderCandidates } from './candidates.js';

/**
 * Finds the `@LeaderElection` providers and makes each a candidate once the application has bootstrapped (every
 * `onModuleInit` has run, the engine included). At shutdown (its hook runs before the engine's: it depends on it) it
 * closes the engine and stops every candidate side by side: a leader's lease is released at once, so the next
 * instance is elected without waiting for a timeout, and a sticky call in progress drains with the other calls.
 */
@Injectable()
export class LeaderExplorer implements OnApplicationBootstrap, BeforeApplicationShutdown {
  constructor(
    @Inject(ModulesContainer) private readonly modules: ModulesContainer,
    @Inject(LeaderCandidates) private readonly candidates: LeaderCandidates,
  ) {}

  onApplicationBootstrap(): void {
    const seen = new Set<unknown>();
    for (const module of this.modules.values()) {
      for (const wrapper of module.providers.values()) {
        const instance = wrapper.isDependencyTreeStatic() ? (wrapper.instance as OnLeadership | undefined) : undefined;
        if (!instance || typeof instance !== 'object' || seen.has(instance)) continue;
        seen.add(instance);
        const metadata = Reflect.getMetadata(LEADER_METADATA, instance.constructor) as
          (LeaderElectionOptions & { targetKey: string }) | undefined;
        if (!metadata) continue;
        const { targetKey, ...options } = metadata;
        this.candidates.start(targetKey, {
          ...options,
          onElected: (lease) => instance.onElected?.(lease),
          onRevoked: (reason) => instance.onRevoked?.(reason),
        });
      }
    }
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.candidates.closeWithEngine();
  }
}
