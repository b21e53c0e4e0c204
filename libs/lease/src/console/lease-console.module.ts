import { type CanActivate, type DynamicModule, Module, type ModuleMetadata, type Type } from '@nestjs/common';
import { LeaseConfigError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import { trustedOriginsOf } from './console-request.guard.js';
import { consoleControllers } from './lease-console.controller.js';

/** `LeaseConsoleModule.forRoot()` (docs/console.md). */
export interface LeaseConsoleOptions {
  /**
   * Route prefix of the console's endpoints.
   * @default 'lease-console'
   */
  path?: string;
  /**
   * The app's guard, run before every console route (reads and actions): a `CanActivate` class (instantiated in the
   * console module: its dependencies come from global modules or `imports`) or instance. Required, unless `public`.
   */
  guard?: Type<CanActivate> | CanActivate;
  /**
   * Serves the reads without a guard, to whoever reaches them: every key and its holder (keys may be personal data).
   * Only on purpose (a network only operators reach); without it, `forRoot()` without a `guard` throws a
   * `LeaseConfigError`. Refused with a `guard` (contradictory) and with `actions` (they always need a guard).
   * @default false
   */
  public?: boolean;
  /**
   * Mounts the write actions: `POST force-release`, `drain`, `undrain`. Off by default; refused at bootstrap
   * (`LeaseConfigError`) without a `guard`. They take JSON only, from the console's own origin only (no cross-site
   * request: docs/console.md).
   * @default false
   */
  actions?: boolean;
  /**
   * Who acts, from the request the guard let through (e.g. `(req) => req.user?.email`): recorded in the audit row in
   * place of the body's `by`. Without it, the body's `by` is recorded as sent.
   */
  actor?: (request: unknown) => string | undefined;
  /**
   * Origins besides the console's own whose pages may send the actions (`https://admin.example.com`): an admin page
   * served elsewhere, or the public origin when a proxy in front rewrites `Host`. Every other origin is refused (403).
   * @default []
   */
  trustedOrigins?: readonly string[];
  /**
   * The operator's page at the console's root path (`GET <path>`, docs/console.md): holders, waiters, semaphore slots,
   * leaders, drains, a key's timeline, the audit trail and — with `actions` — force-release, drain and undrain, each
   * confirmed first. One self-contained HTML document with a strict Content-Security-Policy; it holds no data and is
   * served without the guard, every request it makes going through the guard. `headers`: request headers the guard
   * reads (a token, say: `['authorization']`), which the page asks the operator for and sends with every request,
   * kept in the browser tab's session storage; a guard that reads the session cookie needs none. `false`: no page.
   * @default true
   */
  page?: boolean | { headers?: readonly string[] };
  /** Modules the guard class's dependencies come from. */
  imports?: ModuleMetadata['imports'];
}

/** A header name a page may send (RFC 9110 token), other than those a browser sets itself or refuses to send. */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9a-z-]+$/;
const BROWSER_HEADERS = new Set([
  'accept-charset',
  'accept-encoding',
  'access-control-request-headers',
  'access-control-request-method',
  'connection',
  'content-length',
  'content-type',
  'cookie',
  'cookie2',
  'date',
  'dnt',
  'expect',
  'host',
  'keep-alive',
  'origin',
  'referer',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'via',
]);

/** The page option resolved: false, or the headers it asks for (lower case); undefined when it is invalid. */
function pageOf(page: unknown): false | { headers: string[] } | undefined {
  if (page === undefined || page === true) return { headers: [] };
  if (page === false) return false;
  if (typeof page !== 'object' || page === null || Array.isArray(page)) return undefined;
  const { headers = [], ...rest } = page as { headers?: unknown };
  if (Object.keys(rest).length > 0 || !Array.isArray(headers)) return undefined;
  const names = headers.map((name: unknown) => (typeof name === 'string' ? name.toLowerCase() : ''));
  const sendable = (name: string) =>
    HEADER_NAME.test(name) && !BROWSER_HEADERS.has(name) && !name.startsWith('sec-') && !name.startsWith('proxy-');
  return names.every(sendable) ? { headers: [...new Set(names)] } : undefined;
}

function assertBoolean(name: string, value: unknown): void {
  if (typeof value !== 'boolean') throw new LeaseConfigError(messages.consoleOption(name, 'a boolean', typeof value));
}

/**
 * The operator's console over HTTP: its page at `GET <path>` (see `page`), the reads `GET <path>/leases`,
 * `history?key=`, `drains`, `audit`, `leaders`, `capabilities`, and with `actions: true` `POST <path>/force-release`,
 * `drain`, `undrain`. Behind the app's `guard` (required; or `public: true` for the reads alone). Needs `LeaseModule`
 * (it uses the global `LeaseService` and `LeaseOperator`).
 *
 * @example LeaseConsoleModule.forRoot({ guard: AdminGuard, actions: true, actor: (req) => req.user.email })
 */
@Module({})
export class LeaseConsoleModule {
  static forRoot(options: LeaseConsoleOptions = {}): DynamicModule {
    const { path = 'lease-console', guard, actions = false, public: isPublic = false, actor } = options;
    const { trustedOrigins = [], imports = [] } = options;
    const page = pageOf(options.page);
    if (page === undefined) {
      throw new LeaseConfigError(messages.consolePage(JSON.stringify(options.page) ?? typeof options.page));
    }
    if (typeof path !== 'string' || path.length === 0) throw new LeaseConfigError(messages.consolePath(typeof path));
    assertBoolean('actions', actions);
    assertBoolean('public', isPublic);
    if (actions && !guard) throw new LeaseConfigError(messages.consoleNeedsGuard());
    if (isPublic && guard) throw new LeaseConfigError(messages.consolePublicWithGuard());
    if (!guard && !isPublic) throw new LeaseConfigError(messages.consoleNeedsGuardOrPublic());
    const trusted = Array.isArray(trustedOrigins) ? trustedOriginsOf(trustedOrigins) : undefined;
    if (trusted === undefined) {
      throw new LeaseConfigError(
        messages.consoleTrustedOrigins(JSON.stringify(trustedOrigins) ?? typeof trustedOrigins),
      );
    }
    return {
      module: LeaseConsoleModule,
      imports,
      controllers: consoleControllers({ path, guard, actions, actor, trustedOrigins: trusted, page }),
    };
  }
}
