import type { ExecutionContext } from '@nestjs/common';
import { ForbiddenException, UnsupportedMediaTypeException } from '@nestjs/common';
import { ConsoleRequestGuard, trustedOriginsOf } from './console-request.guard.js';

/** The console's request rule on its own: which header sets pass to the app's guard, which are refused and how. */
describe('ConsoleRequestGuard', () => {
  const guard = new ConsoleRequestGuard(trustedOriginsOf(['https://admin.example.com'])!);
  const json = { host: 'console.example.com', 'content-type': 'application/json' };

  function verdict(headers: Record<string, string | string[]>): number {
    const context = { switchToHttp: () => ({ getRequest: () => ({ headers }) }) } as unknown as ExecutionContext;
    try {
      return guard.canActivate(context) ? 200 : 0;
    } catch (error) {
      if (error instanceof ForbiddenException || error instanceof UnsupportedMediaTypeException) {
        return error.getStatus();
      }
      throw error;
    }
  }

  it.each<[string, number, Record<string, string | string[]>]>([
    ['no Origin, no Sec-Fetch-Site (a script)', 200, json],
    ['Origin of the Host', 200, { ...json, origin: 'https://console.example.com' }],
    [
      'Origin of the Host, its default port spelled out in Host',
      200,
      { ...json, host: 'console.example.com:443', origin: 'https://console.example.com' },
    ],
    ['Host in capitals', 200, { ...json, host: 'Console.Example.com', origin: 'http://console.example.com' }],
    ['Origin of another host', 403, { ...json, origin: 'https://evil.example' }],
    ['Origin of another port', 403, { ...json, origin: 'https://console.example.com:8443' }],
    ['Origin null (a sandboxed frame, a redirect)', 403, { ...json, origin: 'null' }],
    ['Origin unparsable', 403, { ...json, origin: 'https://console.example.com:x' }],
    ['Origin without a Host to compare with', 403, { 'content-type': 'application/json', origin: 'https://a.example' }],
    [
      'Sec-Fetch-Site same-origin (decides over a rewritten Host)',
      200,
      { ...json, origin: 'https://public.example', 'sec-fetch-site': 'same-origin' },
    ],
    ['Sec-Fetch-Site none (the user, not a page)', 200, { ...json, 'sec-fetch-site': 'none' }],
    ['Sec-Fetch-Site cross-site', 403, { ...json, 'sec-fetch-site': 'cross-site' }],
    [
      'Sec-Fetch-Site same-site (another origin of the site)',
      403,
      { ...json, origin: 'https://console.example.com', 'sec-fetch-site': 'same-site' },
    ],
    [
      'a trusted origin, cross-site',
      200,
      { ...json, origin: 'https://admin.example.com', 'sec-fetch-site': 'cross-site' },
    ],
    ['a trusted origin with its default port', 200, { ...json, origin: 'https://admin.example.com:443' }],
    ['a trusted origin in another scheme', 403, { ...json, origin: 'http://admin.example.com' }],
    ['JSON with a charset', 200, { ...json, 'content-type': 'Application/JSON; charset=utf-8' }],
    [
      'a form, same origin',
      415,
      { ...json, 'content-type': 'application/x-www-form-urlencoded', origin: 'https://console.example.com' },
    ],
    ['multipart', 415, { ...json, 'content-type': 'multipart/form-data; boundary=x' }],
    ['text/plain', 415, { ...json, 'content-type': 'text/plain' }],
    ['JSON-like but not JSON', 415, { ...json, 'content-type': 'application/json-patch+json' }],
    ['no Content-Type', 415, { host: 'console.example.com' }],
    [
      'a form from another origin: the origin first',
      403,
      { ...json, 'content-type': 'text/plain', origin: 'https://evil.example' },
    ],
  ])('%s → %i', (_, status, headers) => {
    expect(verdict(headers)).toBe(status);
  });

  it('says why, and what to do, in the refusal', () => {
    expect(() =>
      guard.canActivate({
        switchToHttp: () => ({ getRequest: () => ({ headers: { ...json, origin: 'https://evil.example' } }) }),
      } as unknown as ExecutionContext),
    ).toThrow(/origin https:\/\/evil\.example .*CSRF.*trustedOrigins/);
  });

  it('trustedOriginsOf: origins only (scheme, host, port), in their serialized form', () => {
    expect(trustedOriginsOf(['https://A.example.com/', 'http://localhost:8080'])).toEqual(
      new Set(['https://a.example.com', 'http://localhost:8080']),
    );
    for (const bad of [
      'admin.example.com',
      'https://a.example/path',
      'ftp://a.example',
      'https://u:p@a.example',
      'null',
      42,
    ]) {
      expect(trustedOriginsOf([bad])).toBeUndefined();
    }
  });
});
