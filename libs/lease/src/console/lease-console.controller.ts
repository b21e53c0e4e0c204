/**
 * The console's HTTP routes (docs/console.md), built for one `LeaseConsoleModule.forRoot()`: reads
 * always (behind the app's guard, or public when the app says so); the actions only when asked for, and then always
 * behind the console's request rule (same origin, JSON: no cross-site request) and the app's guard. Private: the
 * module is the door.
 */
import {
  applyDecorators,
  Body,
  type CanActivate,
  Controller,
  Get,
  Header,
  HttpCode,
  Inject,
  Post,
  Query,
  Req,
  type Type,
  UseFilters,
  UseGuards,
} from '@nestjs/common';
import { candidatesOf } from '../engine-of.js';
import type { LeaseSnapshot } from '../interfaces/lease-event.interface.js';
import { LeaseService } from '../lease.service.js';
import { LeaseExceptionFilter } from '../transport/lease-exception.filter.js';
import { CONSOLE_PAGE_HEADERS, consolePage } from './console-page.js';
import { ConsoleRequestGuard } from './console-request.guard.js';
import { LeaseOperator } from './lease-operator.js';

/** The options the routes need (see `LeaseConsoleOptions`). */
export interface ConsoleRoutes {
  readonly path: string;
  readonly guard?: Type<CanActivate> | CanActivate;
  readonly actions: boolean;
  readonly actor?: (request: unknown) => string | undefined;
  /** Origins besides the console's own whose pages may send the actions (`URL.origin` form). */
  readonly trustedOrigins: ReadonlySet<string>;
  /** The page at the root path, and the headers it asks the operator for (lower case); none when `false`. */
  readonly page: false | { readonly headers: readonly string[] };
}

/** JSON has no bigint: fencing tokens travel as decimal strings. */
function plain<T extends object>(row: T): T {
  return Object.fromEntries(
    Object.entries(row).map(([key, value]) => [key, typeof value === 'bigint' ? String(value) : value]),
  ) as T;
}

interface ActionBody {
  targetKey?: unknown;
  subject?: unknown;
  template?: unknown;
  by?: unknown;
  reason?: unknown;
}

function limitOf(raw: string | undefined): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  return Number(raw);
}

/** The controllers of one console: a fresh class each, so two consoles may carry different guards and paths. */
export function consoleControllers(routes: ConsoleRoutes): Type[] {
  const guarded = <T extends Type>(controller: T, ...first: CanActivate[]): T => {
    UseFilters(LeaseExceptionFilter)(controller);
    const guards = routes.guard ? [...first, routes.guard] : first;
    if (guards.length > 0) UseGuards(...guards)(controller);
    Controller(routes.path)(controller);
    return controller;
  };

  class LeaseConsoleReads {
    constructor(
      @Inject(LeaseService) private readonly leases: LeaseService,
      @Inject(LeaseOperator) private readonly operator: LeaseOperator,
    ) {}

    @Get('leases')
    async list(): Promise<LeaseSnapshot[]> {
      return (await this.leases.list()).map(plain);
    }

    @Get('history')
    async history(@Query('key') key?: string, @Query('limit') limit?: string) {
      const entries = await this.operator.history(key as string, { limit: limitOf(limit) });
      return entries.map(plain);
    }

    @Get('drains')
    drains() {
      return this.operator.drains();
    }

    @Get('audit')
    async audit(@Query('limit') limit?: string) {
      return (await this.operator.audit({ limit: limitOf(limit) })).map(plain);
    }

    /** Whether the actions are mounted (the page shows its buttons only then). */
    @Get('capabilities')
    capabilities() {
      return { actions: routes.actions };
    }

    /** The elections this process takes part in (a lease row does not say which keys are leader keys). */
    @Get('leaders')
    leaders() {
      return candidatesOf(this.leases).elections();
    }
  }

  class LeaseConsoleActions {
    constructor(@Inject(LeaseOperator) private readonly operator: LeaseOperator) {}

    @Post('force-release')
    @HttpCode(200)
    async forceRelease(@Body() body: ActionBody, @Req() request: unknown) {
      return plain(await this.operator.forceRelease(body?.targetKey as string, actionOf(body, request)));
    }

    @Post('drain')
    @HttpCode(200)
    drain(@Body() body: ActionBody, @Req() request: unknown) {
      return this.operator.drain(body?.subject as string, { ...actionOf(body, request), template: templateOf(body) });
    }

    @Post('undrain')
    @HttpCode(200)
    async undrain(@Body() body: ActionBody, @Req() request: unknown) {
      const removed = await this.operator.undrain(body?.subject as string, {
        ...actionOf(body, request),
        template: templateOf(body),
      });
      return { removed };
    }
  }

  /** Who acts: the guard's verdict (`actor(request)`) when the app gives one, else the body's `by`. */
  const actionOf = (body: ActionBody | undefined, request: unknown) => ({
    by: (routes.actor?.(request) ?? body?.by) as string,
    reason: body?.reason as string,
  });
  const templateOf = (body: ActionBody | undefined) => body?.template as boolean | undefined;

  const controllers: Type[] = [guarded(LeaseConsoleReads)];
  // The actions' request rule runs before the app's guard: a forged request is refused whoever's cookie it carries.
  if (routes.actions) controllers.push(guarded(LeaseConsoleActions, new ConsoleRequestGuard(routes.trustedOrigins)));
  if (routes.page) controllers.push(pageController(routes.path, routes.actions, routes.page.headers));
  return controllers;
}

/**
 * The page at the console's root path (console-page.ts). Static — no key, no holder, nothing of the database in it —
 * so it is served without the app's guard (a guard reading a header, not a cookie, could never let a browser's
 * navigation through): every read and action the page makes goes through the guard, with the headers the operator
 * typed into it.
 */
function pageController(path: string, actions: boolean, headers: readonly string[]): Type {
  const html = consolePage({ actions, headers });
  const served = applyDecorators(
    Get(),
    ...Object.entries(CONSOLE_PAGE_HEADERS).map(([name, value]) => Header(name, value)),
  );
  class LeaseConsolePage {
    @served
    page(): string {
      return html;
    }
  }
  Controller(path)(LeaseConsolePage);
  return LeaseConsolePage;
}
