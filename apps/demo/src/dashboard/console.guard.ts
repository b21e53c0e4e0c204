import type { CanActivate, ExecutionContext } from '@nestjs/common';

/**
 * The demo's guard of the operator's console: the request must carry the configured token in `x-console-token`
 * (`CONSOLE_TOKEN`). A real app authenticates its operators (a session, an OIDC token, mTLS) and names them through
 * `LeaseConsoleModule`'s `actor` option; this one takes the operator's name from `x-operator`.
 */
export class ConsoleTokenGuard implements CanActivate {
  constructor(private readonly token: string) {}

  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, string | string[] | undefined> }>();
    return request.headers['x-console-token'] === this.token;
  }
}

/** Who acts, for the audit row: the `x-operator` header the page sends (the guard has let the request through). */
export function consoleActor(request: unknown): string | undefined {
  const value = (request as { headers: Record<string, string | string[] | undefined> }).headers['x-operator'];
  return typeof value === 'string' && value.trim() !== '' ? value : undefined;
}
