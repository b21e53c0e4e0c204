import 'reflect-metadata';
import { jest } from '@jest/globals';
import type { CallHandler, ExecutionContext } from '@nestjs/common';
import { HttpException } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { firstValueFrom, NEVER, of, throwError } from 'rxjs';
import { LeaseBusyError } from '../errors/lease.errors.js';
import { handlerCalls } from './exclusive-call.js';
import { EXCLUSIVE_METADATA } from '../lease.internal-constants.js';
import { ExclusiveInterceptor } from './exclusive.interceptor.js';

/** The handler door, with a hand-made ExecutionContext: what it maps, and the call signal it gives the wrapper. */
describe('ExclusiveInterceptor', () => {
  const interceptor = new ExclusiveInterceptor(new Reflector());
  const decorated = () => undefined;
  Reflect.defineMetadata(EXCLUSIVE_METADATA, { targetKey: 'k' }, decorated);
  const plain = () => undefined;

  function context(handler: Function, type: 'http' | 'ws' | 'rpc' = 'http') {
    const headers: Record<string, string> = {};
    const response = { setHeader: (name: string, value: string) => (headers[name] = value) };
    const execution = {
      getHandler: () => handler,
      getClass: () => Object,
      getType: () => type,
      switchToHttp: () => ({ getResponse: () => response, getRequest: () => ({}) }),
    } as unknown as ExecutionContext;
    return { execution, headers };
  }
  const handling = (handle: CallHandler['handle']): CallHandler => ({ handle });

  it('leaves handlers without @Exclusive alone', async () => {
    const { execution } = context(plain);
    const error = new LeaseBusyError('k', 1_000);
    const result = interceptor.intercept(
      execution,
      handling(() => throwError(() => error)),
    );
    await expect(firstValueFrom(result)).rejects.toBe(error);
  });

  it('maps a lease error to its HTTP answer, with Retry-After on the response', async () => {
    const { execution, headers } = context(decorated);
    const result = interceptor.intercept(
      execution,
      handling(() => throwError(() => new LeaseBusyError('k', 2_000))),
    );
    const error = await firstValueFrom(result).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(HttpException);
    expect((error as HttpException).getStatus()).toBe(409);
    expect(headers['Retry-After']).toBe('2');
  });

  it('passes values and other errors through', async () => {
    const { execution } = context(decorated);
    await expect(
      firstValueFrom(
        interceptor.intercept(
          execution,
          handling(() => of(5)),
        ),
      ),
    ).resolves.toBe(5);
    const other = new Error('not a lease error');
    const failing = interceptor.intercept(
      execution,
      handling(() => throwError(() => other)),
    );
    await expect(firstValueFrom(failing)).rejects.toBe(other);
  });

  it("gives the handler's call a signal that aborts when the caller unsubscribes before the end", () => {
    const { execution } = context(decorated);
    let signal: AbortSignal | undefined;
    const subscription = interceptor
      .intercept(
        execution,
        handling(() => {
          signal = handlerCalls.getStore()?.signal;
          return NEVER;
        }),
      )
      .subscribe();
    expect(signal?.aborted).toBe(false);
    subscription.unsubscribe();
    expect(signal?.aborted).toBe(true);
    expect((signal?.reason as DOMException).name).toBe('AbortError');
  });

  it('a call whose signal nobody read still tells its wrapper that the caller left, and its signal read late is aborted', () => {
    const { execution } = context(decorated);
    let call: ReturnType<typeof handlerCalls.getStore>;
    const subscription = interceptor
      .intercept(
        execution,
        handling(() => {
          call = handlerCalls.getStore();
          return NEVER;
        }),
      )
      .subscribe();
    const onGone = jest.fn();
    call!.onGone = onGone;
    expect(call!.gone).toBe(false);
    subscription.unsubscribe();
    expect(onGone).toHaveBeenCalledTimes(1);
    expect(call!.gone).toBe(true);
    expect(call!.signal.aborted).toBe(true);
    expect(call!.signal.reason).toBe(call!.reason);
    expect((call!.reason as DOMException).name).toBe('AbortError');
  });

  it('maps an error of the call once its mapping settled, on every transport', async () => {
    const { execution } = context(decorated, 'ws');
    const other = new Error('not a lease error');
    const failing = interceptor.intercept(
      execution,
      handling(() => throwError(() => other)),
    );
    await expect(firstValueFrom(failing)).rejects.toBe(other);
  });

  it('a call that ended does not abort on the unsubscription that follows', async () => {
    const { execution } = context(decorated);
    let signal: AbortSignal | undefined;
    await firstValueFrom(
      interceptor.intercept(
        execution,
        handling(() => {
          signal = handlerCalls.getStore()?.signal;
          return of(1);
        }),
      ),
    );
    expect(signal?.aborted).toBe(false);
  });
});
