import 'reflect-metadata';
import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import { acquireOptionsOf, type ExclusiveMetadata, providerTargetKey } from './exclusive.metadata.js';
import { EXCLUSIVE_METADATA, EXCLUSIVE_WRAPPED } from './lease.constants.js';
import { LeaseService } from './lease.service.js';

type AnyMethod = (...args: unknown[]) => unknown;

/**
 * Interceptors do not run for provider methods, so at bootstrap this wraps every `@Exclusive` method of every
 * singleton provider: any caller (another service, a queue consumer, `onApplicationBootstrap`) then runs it under
 * the lease through `LeaseService.run`. Controllers are left to `ExclusiveInterceptor`, so a handler is never
 * acquired twice. The wrapper keeps the original's metadata and name.
 */
@Injectable()
export class ExclusiveExplorer implements OnModuleInit {
  private readonly logger = new Logger(ExclusiveExplorer.name);

  // Explicit tokens: toolchains without decorator metadata (esbuild, tsx, vitest) could not inject by type.
  constructor(
    @Inject(DiscoveryService) private readonly discovery: DiscoveryService,
    @Inject(MetadataScanner) private readonly scanner: MetadataScanner,
    @Inject(Reflector) private readonly reflector: Reflector,
    @Inject(LeaseService) private readonly leases: LeaseService,
  ) {}

  onModuleInit(): void {
    const controllers = new Set(this.discovery.getControllers().map((wrapper) => wrapper.instance));
    for (const wrapper of this.discovery.getProviders()) {
      const instance = wrapper.instance as Record<string, unknown> | undefined;
      if (!instance || typeof instance !== 'object' || controllers.has(instance)) continue;
      const prototype = Object.getPrototypeOf(instance) as object | null;
      if (!prototype) continue;
      for (const name of this.scanner.getAllMethodNames(prototype)) {
        const method = instance[name];
        if (typeof method !== 'function' || (method as { [EXCLUSIVE_WRAPPED]?: boolean })[EXCLUSIVE_WRAPPED]) continue;
        const metadata = this.reflector.get<ExclusiveMetadata | undefined>(EXCLUSIVE_METADATA, method);
        if (!metadata) continue;
        if (!wrapper.isDependencyTreeStatic()) {
          this.logger.warn(`@Exclusive on ${wrapper.name}.${name} is ignored: only singleton providers are wrapped`);
          continue;
        }
        instance[name] = wrapExclusive(method as AnyMethod, instance, metadata, this.leases);
      }
    }
  }
}

/** The provider-side door into `LeaseService.run`; other decorators' metadata on the method is carried over. */
export function wrapExclusive(original: AnyMethod, instance: object, metadata: ExclusiveMetadata, leases: LeaseService): AnyMethod {
  const options = acquireOptionsOf(metadata);
  const wrapped = async function (...args: unknown[]) {
    return leases.run(providerTargetKey(metadata, args), () => original.apply(instance, args), options);
  };
  for (const key of Reflect.getOwnMetadataKeys(original)) {
    Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, original), wrapped);
  }
  Object.defineProperty(wrapped, 'name', { value: original.name });
  Object.defineProperty(wrapped, EXCLUSIVE_WRAPPED, { value: true });
  return wrapped;
}
