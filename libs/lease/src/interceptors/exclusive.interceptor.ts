import { type CallHandler, type ExecutionContext, Inject, Injectable, type NestInterceptor } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { catchError, defer, Observable, switchMap, throwError } from 'rxjs';
import { LeaseLostError } from '../errors.js';
import { acquireOptionsOf, controllerTargetKey, type ExclusiveMetadata } from '../exclusive.metadata.js';
import type { LeaseEntry } from '../lease.service.js';
import { LeaseService } from '../lease.service.js';
import { EXCLUSIVE_METADATA, LEASE_OF_REQUEST } from '../lease.constants.js';
import { leaseErrorToHttp } from '../lease-http.js';

/**
 * Runs an `@Exclusive` controller handler under its lease: resolves the key from the request, acquires (or waits),
 * runs the handler in the lease's call context, ends the request with `LeaseLostError` (409, result discarded) the
 * moment the lease is lost, and releases before the response is sent — on completion, error or unsubscription.
 */
@Injectable()
export class ExclusiveInterceptor implements NestInterceptor {
  // Explicit tokens: toolchains without decorator metadata (esbuild, tsx, vitest) could not inject by type.
  constructor(
    @Inject(LeaseService) private readonly leases: LeaseService,
    @Inject(Reflector) private readonly reflector: Reflector,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const metadata = this.reflector.get<ExclusiveMetadata | undefined>(EXCLUSIVE_METADATA, context.getHandler());
    if (!metadata) return next.handle();
    const response = context.getType() === 'http' ? context.switchToHttp().getResponse() : undefined;
    return defer(() => this.leases.enter(controllerTargetKey(metadata, context), acquireOptionsOf(metadata))).pipe(
      switchMap((entry) => this.handleUnder(entry, context, next)),
      catchError((error: unknown) => throwError(() => leaseErrorToHttp(error, response))),
    );
  }

  private handleUnder(entry: LeaseEntry, context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const { lease, exit } = entry;
    const holder = context.getType() === 'http' ? context.switchToHttp().getRequest() : context.getArgByIndex(0);
    if (holder && typeof holder === 'object') (holder as Record<symbol, unknown>)[LEASE_OF_REQUEST] = lease;
    return new Observable<unknown>((subscriber) => {
      let settled = false;
      const settle = (finish: () => void) => {
        if (settled) return;
        settled = true;
        lease.signal.removeEventListener('abort', onAbort);
        // Release before the response goes out, so a client that got its answer can start the next run at once.
        void exit().finally(finish);
      };
      const onAbort = () => {
        if (lease.signal.reason instanceof LeaseLostError) {
          inner.unsubscribe();
          settle(() => subscriber.error(lease.signal.reason));
        }
      };
      // next.handle() binds the handler to the async context it is called in: the lease's.
      const inner = this.leases.within(lease, () => next.handle()).subscribe({
        next: (value) => subscriber.next(value),
        error: (error: unknown) => settle(() => subscriber.error(error)),
        complete: () => settle(() => subscriber.complete()),
      });
      if (lease.signal.aborted) onAbort();
      else if (!settled) lease.signal.addEventListener('abort', onAbort);
      return () => {
        inner.unsubscribe();
        settle(() => undefined);
      };
    });
  }
}
