import type { CanActivate, ExecutionContext } from '@nestjs/common';

/**
 * The demo's guard of the operator's console: the request must carry the configured token in `x-console-token`
 * (`CONSOLE_TOKEN`), which the console's page asks the operator for (`page: { headers: ['x-console-token'] }`). A real
 * app authenticates its operators (a session, an OIDC token, mTLS) and names them through `LeaseConsoleModule`'s
 * `actor` option; here the audit trail records the name the operator types into the page's confirmation.
 */
export class ConsoleTokenGuard implements CanActivate {
  constructor(private readonly token: string) {}

  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, string | string[] | undefined> }>();
    return request.headers['x-console-token'] === this.token;
  }
}
