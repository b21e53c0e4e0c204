import { type DynamicModule, type INestApplication, type Provider, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Module } from '@nestjs/common';

/** Boots a real Nest HTTP app on a free loopback port and returns its base URL. */
export async function startApp(
  imports: Array<Type | DynamicModule>,
  controllers: Type[] = [],
  providers: Provider[] = [],
  /** Runs before `listen`: adapters, global interceptors, connected microservices. */
  configure?: (app: INestApplication) => void,
): Promise<{ app: INestApplication; url: string }> {
  @Module({ imports, controllers, providers })
  class TestAppModule {}
  const app = await NestFactory.create(TestAppModule, { logger: ['error'] });
  configure?.(app);
  // The server keeps an idle connection longer than the client (undici: 4 s), so the client never reuses one the
  // server is closing (ECONNRESET, seen when a test paused between requests on a loaded machine).
  (app.getHttpServer() as { keepAliveTimeout: number }).keepAliveTimeout = 60_000;
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address() as { port: number };
  return { app, url: `http://127.0.0.1:${address.port}` };
}

/** A gate the test opens when it has seen what it needs; handlers wait on it while holding their lease. */
export class Gate {
  private open!: () => void;
  readonly opened = new Promise<void>((resolve) => (this.open = resolve));
  entered = 0;
  release(): void {
    this.open();
  }
}

export async function post(
  url: string,
  body?: unknown,
): Promise<{ status: number; body: any; retryAfter: string | null }> {
  const response = await fetch(url, {
    method: 'POST',
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // plain text answer
  }
  return { status: response.status, body: parsed, retryAfter: response.headers.get('retry-after') };
}
