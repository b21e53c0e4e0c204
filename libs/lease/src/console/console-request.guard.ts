/**
 * The console's rule for its write routes (docs/console.md, cross-site requests): an action is a request
 * that a page of another origin cannot make the operator's browser send, whatever cookie the browser attaches.
 * Private: the console's controllers bind it before the app's guard.
 *
 * 1. Where from (403 when foreign). A browser says it and a page cannot forge it: `Sec-Fetch-Site` when sent
 *    (`same-origin`, or `none` for the user's own action, pass), else `Origin` compared with the request's own `Host`.
 *    An origin listed in `trustedOrigins` passes either way. Neither header: not a browser (a script, an admin tool),
 *    which no foreign page can drive — it passes to the app's guard. The same rule as Go's
 *    `net/http.CrossOriginProtection`.
 * 2. What (415 unless JSON). `Content-Type: application/json` only: a form (`x-www-form-urlencoded`, `multipart`) or
 *    `text/plain` is what a foreign page may send without asking; JSON needs a CORS preflight, which a browser makes
 *    first and the rule above refuses even when the app's CORS policy says yes.
 */
import {
  type CanActivate,
  type ExecutionContext,
  ForbiddenException,
  UnsupportedMediaTypeException,
} from '@nestjs/common';
import { messages } from '../errors/lease.messages.js';

type Headers = Record<string, string | string[] | undefined>;

/** The trusted origins as `URL.origin` serializes them, or `undefined` when an entry is not an http(s) origin. */
export function trustedOriginsOf(entries: readonly unknown[]): Set<string> | undefined {
  const origins = new Set<string>();
  for (const entry of entries) {
    const url = typeof entry === 'string' ? parsed(entry) : undefined;
    const bare = url !== undefined && url.pathname === '/' && url.search === '' && url.hash === '';
    if (!bare || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.username || url.password) {
      return undefined;
    }
    origins.add(url.origin);
  }
  return origins;
}

function parsed(text: string): URL | undefined {
  try {
    return new URL(text);
  } catch {
    return undefined;
  }
}

function header(headers: Headers, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}

/** Whether `origin` (the `Origin` header, parsed) names the host the request was sent to (`Host`). */
function sameHost(origin: URL, headers: Headers): boolean {
  const host = header(headers, 'host') ?? header(headers, ':authority');
  if (host === undefined) return false;
  // The Host header in the origin's scheme: a default port (":80" for http) drops out as it does from the origin.
  return parsed(`${origin.protocol}//${host}`)?.host === origin.host;
}

/** Refuses a write request a page of another origin could have sent (403), or one that is not JSON (415). */
export class ConsoleRequestGuard implements CanActivate {
  constructor(private readonly trustedOrigins: ReadonlySet<string>) {}

  canActivate(context: ExecutionContext): boolean {
    const { headers } = context.switchToHttp().getRequest<{ headers: Headers }>();
    this.assertSameOrigin(headers);
    const type = header(headers, 'content-type');
    if (type?.split(';')[0].trim().toLowerCase() !== 'application/json') {
      throw new UnsupportedMediaTypeException(messages.consoleNotJson(type ?? 'none'));
    }
    return true;
  }

  private assertSameOrigin(headers: Headers): void {
    const origin = header(headers, 'origin');
    const url = origin === undefined ? undefined : parsed(origin);
    if (url !== undefined && this.trustedOrigins.has(url.origin)) return;
    const site = header(headers, 'sec-fetch-site');
    if (site !== undefined) {
      if (site === 'same-origin' || site === 'none') return;
      throw new ForbiddenException(messages.consoleForeignSite(site, origin));
    }
    if (origin === undefined) return;
    if (url === undefined || !sameHost(url, headers)) {
      throw new ForbiddenException(messages.consoleForeignOrigin(origin));
    }
  }
}
