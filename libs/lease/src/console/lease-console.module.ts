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
  /** Modules the guard class's dependencies come from. */
  imports?: ModuleMetadata['imports'];
}

function assertBoolean(name: string, value: unknown): void {
  if (typeof value !== 'boolean') throw new LeaseConfigError(messages.consoleOption(name, 'a boolean', typeof value));
}

/**
 * The operator's console over HTTP: `GET <path>/leases`, `history?key=`, `drains`, `audit`, `capabilities`, and with
 * `actions: true` `POST <path>/force-release`, `drain`, `undrain`. Behind the app's `guard` (required; or `public:
 * true` for the reads alone). Needs `LeaseModule` (it uses the global `LeaseService` and `LeaseOperator`).
 *
 * @example LeaseConsoleModule.forRoot({ guard: AdminGuard, actions: true, actor: (req) => req.user.email })
 */
@Module({})
export class LeaseConsoleModule {
  static forRoot(options: LeaseConsoleOptions = {}): DynamicModule {
    const { path = 'lease-console', guard, actions = false, public: isPublic = false, actor } = options;
    const { trustedOrigins = [], imports = [] } = options;
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
      controllers: consoleControllers({ path, guard, actions, actor, trustedOrigins: trusted }),
    };
  }
}
