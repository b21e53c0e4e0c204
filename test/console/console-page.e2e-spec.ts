import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type CanActivate, type ExecutionContext, type INestApplication, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { type BrowserContext, chromium } from 'playwright-core';
import { type Lease, LeaseConfigError, LeaseConsoleModule, LeaseModule, LeaseService } from 'nest-pg-lease';
import { eventually, FAST, useTestDatabase } from '../support/db.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

// The console's page (issue 41): LeaseConsoleModule serves one self-contained page at its root path, with a strict
// Content-Security-Policy, behind which the same JSON routes do the work. In headless Chromium (Debian's package):
// the holder, a waiter, a semaphore's slots and a leader shown, keys and owners shown as text (they are user data),
// a screenshot, and one force-release driven through the page, its confirmation included.

const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const skipBrowser = process.env.SKIP_BROWSER_TESTS === '1';
const SCREENSHOT = join(process.cwd(), 'artifacts', 'console-page.png');
/** Leases that outlive a loaded machine's stalls (Chromium starting): a lease ends here only if the console ends it. */
const TIMINGS = mergeLeaseOptions(FAST, { timing: { heartbeatIntervalMs: 1_000, leaseTimeoutMs: 30_000 } });

/** The app's guard: a token in a header, which the page asks the operator for (`page.headers`). */
class TokenGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>();
    return request.headers['x-console-token'] === 'secret';
  }
}

async function consoleApp(url: string, owner: string) {
  @Module({
    imports: [
      LeaseModule.forRoot(
        mergeLeaseOptions(TIMINGS, {
          owner,
          tables: { createSchema: true },
          observability: { journal: true },
          connections: { dataSource: { type: 'postgres', url } },
        }),
      ),
      LeaseConsoleModule.forRoot({ guard: TokenGuard, actions: true, page: { headers: ['X-Console-Token'] } }),
    ],
  })
  class ConsolePageApp {}
  const app = await NestFactory.create(ConsolePageApp, { logger: ['error'] });
  await app.listen(0, '127.0.0.1');
  return { app, url: await app.getUrl() };
}

describe('the console page over HTTP', () => {
  const db = useTestDatabase('console_page');
  let app: INestApplication | undefined;
  let url = '';

  beforeAll(async () => {
    ({ app, url } = await consoleApp(db.url, 'page-http'));
  });
  afterAll(async () => {
    await app?.close();
  });

  test('GET <path>: the page, its Content-Security-Policy naming exactly its inline script and style', async () => {
    for (const path of ['/lease-console', '/lease-console/']) {
      const response = await fetch(`${url}${path}`);
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toBe('text/html; charset=utf-8');
      const html = await response.text();
      const csp = response.headers.get('content-security-policy')!;
      const hash = (text: string) => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;
      const script = /<script>([\s\S]*?)<\/script>/.exec(html)![1];
      const style = /<style>([\s\S]*?)<\/style>/.exec(html)![1];
      expect(csp.split('; ')).toEqual([
        "default-src 'none'",
        `script-src ${hash(script)}`,
        `style-src ${hash(style)}`,
        "connect-src 'self'",
        "img-src 'self' data:",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
      ]);
      expect(csp).not.toMatch(/unsafe-inline|unsafe-eval|https?:/);
      expect(html).not.toMatch(/\bsrc=|\bhref=|\bon[a-z]+=/i);
      expect(response.headers.get('x-frame-options')).toBe('DENY');
      expect(response.headers.get('x-content-type-options')).toBe('nosniff');
      expect(html).toContain('<script type="application/json" id="console-config">');
      expect(JSON.parse(/id="console-config">([^<]*)</.exec(html)![1])).toEqual({
        actions: true,
        headers: ['x-console-token'],
      });
    }
    // The page holds no data: the reads behind it still need the guard's token.
    expect((await fetch(`${url}/lease-console/leases`)).status).toBe(403);
    expect((await fetch(`${url}/lease-console/leaders`)).status).toBe(403);
    const leaders = await fetch(`${url}/lease-console/leaders`, { headers: { 'x-console-token': 'secret' } });
    expect({ status: leaders.status, body: await leaders.json() }).toEqual({ status: 200, body: [] });
  });

  test('without a guard the console still refuses to mount, page or no page; page: false serves none', async () => {
    for (const page of [undefined, true, false, { headers: ['authorization'] }]) {
      expect(() => LeaseConsoleModule.forRoot({ page })).toThrow(LeaseConfigError);
      expect(() => LeaseConsoleModule.forRoot({ page })).toThrow(/needs a guard: .*personal data/);
    }
    const guard = new TokenGuard();
    // The reads, and the page unless told not to.
    expect(LeaseConsoleModule.forRoot({ guard }).controllers).toHaveLength(2);
    expect(LeaseConsoleModule.forRoot({ guard, page: false }).controllers).toHaveLength(1);
    for (const page of [
      { headers: ['cookie'] },
      { headers: ['Content-Type'] },
      { headers: ['sec-fetch-site'] },
      'yes',
    ]) {
      const mount = () => LeaseConsoleModule.forRoot({ guard, page: page as never });
      expect(mount).toThrow(LeaseConfigError);
      expect(mount).toThrow(/option page must be true, false or \{ headers: \[\.\.\.\] \}/);
    }
    // A header name cannot close the page's config block: names are tokens, '<' is not one.
    expect(() => LeaseConsoleModule.forRoot({ guard, page: { headers: ['x-a</script>'] } })).toThrow(LeaseConfigError);
  });
});

(skipBrowser ? describe.skip : describe)('the console page in headless Chromium', () => {
  const db = useTestDatabase('console_page_ui');
  /** A key and an owner that are markup: the page must show them as text. */
  const KEY = 'invoice:<img src=x id=injected>';
  const OWNER = 'worker <b id="bold">1</b>';
  let app: INestApplication | undefined;
  let url = '';
  let context: BrowserContext | undefined;
  let profile: string | undefined;
  let other: Awaited<ReturnType<typeof db.open>>;
  const held: Lease[] = [];

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) {
      throw new Error(
        `No Chromium at ${CHROMIUM}: install Debian's package (apt-get install -y chromium), set CHROMIUM_PATH, or set SKIP_BROWSER_TESTS=1`,
      );
    }
    ({ app, url } = await consoleApp(db.url, OWNER));
    other = await db.open({ owner: 'other-process', timing: { heartbeatIntervalMs: 1_000, leaseTimeoutMs: 30_000 } });
    profile = mkdtempSync(join(tmpdir(), 'console-page-chromium-'));
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1280, height: 1000 },
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
  }, 120_000);

  afterAll(async () => {
    await context?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
    await Promise.all(held.map((lease) => lease.release()));
    await app?.close();
  });

  test('shows holder, waiter, slots and leader as text; a force-release, confirmed, ends the lease', async () => {
    const leases = app!.get(LeaseService);
    const lease = (await leases.tryAcquire(KEY))!;
    expect(lease).not.toBeNull();
    held.push((await leases.tryAcquire('report:busy'))!);
    // Another process waits for report:busy; two slots of a semaphore are held; this instance leads an election.
    const waiting = other.service
      .acquire('report:busy', { priority: 5, onBusy: { wait: { timeoutMs: 60_000 } } })
      .then((granted) => granted.release())
      .catch((error: unknown) => error);
    held.push((await leases.tryAcquire('exports', { limit: 3 }))!, (await leases.tryAcquire('exports', { limit: 3 }))!);
    // A reader of a read-write key: shown with its mode, without the force-release (it frees a key's own row).
    held.push((await leases.tryAcquire('reports:shared', { mode: 'shared' }))!);
    const leadership = leases.elect('leader:digest');
    await eventually(
      () => leadership.isLeader,
      (leads) => leads,
      'this instance to lead leader:digest',
    );

    const tab = await context!.newPage();
    const violations: string[] = [];
    tab.on('console', (message) => {
      if (/Content Security Policy|Refused to/i.test(message.text())) violations.push(message.text());
    });
    tab.on('pageerror', (error) => violations.push(String(error)));
    await tab.goto(`${url}/lease-console`);
    // Without the token the guard refuses the reads, and the page says so.
    await tab.locator('#status[data-status="error"]').waitFor();
    expect(await tab.textContent('#status')).toContain('403');
    await tab.fill('#credentials input[data-header="x-console-token"]', 'secret');
    await tab.locator('#credentials input[data-header="x-console-token"]').dispatchEvent('change');

    const holder = tab.locator('#holders tbody tr').filter({ has: tab.getByText(KEY, { exact: true }) });
    await holder.waitFor({ timeout: 15_000 });
    expect(await holder.getAttribute('data-owner')).toBe(OWNER);
    expect(await holder.getAttribute('data-token')).toBe(String(lease.fencingToken));
    expect(await holder.locator('td').nth(1).textContent()).toBe(OWNER);
    // Markup in keys and owners stayed text: no element was made of it.
    expect(await tab.locator('#injected, #bold').count()).toBe(0);
    await tab.locator('#waiters tr[data-key="report:busy"][data-owner="other-process"]').waitFor({ timeout: 15_000 });
    await tab.locator('#slots tr[data-key="exports"][data-held="2"]').waitFor();
    await tab.locator(`#leaders tr[data-key="leader:digest"][data-leader=${JSON.stringify(OWNER)}]`).waitFor();
    expect(await tab.textContent('#leaders tr[data-key="leader:digest"]')).toContain('leads');
    const reader = tab.locator('#holders tr[data-key="reports:shared"]');
    await reader.waitFor();
    expect(await reader.locator('td').first().textContent()).toBe('reports:shared (shared)');
    expect(await reader.locator('button[data-action="force-release"]').count()).toBe(0);

    mkdirSync(join(process.cwd(), 'artifacts'), { recursive: true });
    await tab.screenshot({ path: SCREENSHOT, fullPage: true });
    expect(existsSync(SCREENSHOT)).toBe(true);

    // Force-release: the confirmation names the key, the holder and the token; cancel first, then confirm.
    await holder.locator('button[data-action="force-release"]').click();
    await tab.locator('#confirm[open]').waitFor();
    const described = await tab.textContent('#confirm-text');
    expect(described).toContain(`Force-release "${KEY}"`);
    expect(described).toContain(`${OWNER} (fencing token ${lease.fencingToken})`);
    await tab.click('#confirm-no');
    await tab.locator('#confirm[open]').waitFor({ state: 'detached' });
    expect(lease.signal.aborted).toBe(false);
    await holder.locator('button[data-action="force-release"]').click();
    // A reason is required before anything is sent.
    await tab.click('#confirm-yes');
    expect(await tab.textContent('#confirm-problem')).toContain('give a reason');
    await tab.fill('#confirm-by', 'alice');
    await tab.fill('#confirm-reason', 'stuck invoice <run>');
    await tab.click('#confirm-yes');
    await tab.locator('#answer[data-status="done"][data-action="force-release"]').waitFor({ timeout: 15_000 });

    // The lease is gone in the database, audited; the page no longer shows it and shows the action.
    const { rows } = await db.admin.query('SELECT lease_token FROM job_lease WHERE target_id = $1', [KEY]);
    expect(rows).toEqual([{ lease_token: null }]);
    const { rows: audit } = await db.admin.query('SELECT action, subject, actor, reason, holder FROM job_lease_audit');
    expect(audit).toEqual([
      { action: 'force-release', subject: KEY, actor: 'alice', reason: 'stuck invoice <run>', holder: OWNER },
    ]);
    await holder.waitFor({ state: 'detached', timeout: 15_000 });
    await tab.locator('#audit tr[data-action="force-release"]').filter({ hasText: 'stuck invoice <run>' }).waitFor();
    // The holder hears of it at its next renewal: its signal aborts.
    await eventually(
      () => lease.signal.aborted,
      (aborted) => aborted,
      'the holder to learn its lease was force-released',
    );
    expect(violations).toEqual([]);
    await leadership.stop();
    await Promise.all(held.splice(0).map((l) => l.release()));
    await waiting;
    await tab.close();
  }, 90_000);

  test('a button pressed across a refresh still gets its click: the page keeps the rows and cells that did not change', async () => {
    const leases = app!.get(LeaseService);
    const key = 'report:pressed';
    held.push((await leases.tryAcquire(key))!);
    const tab = await context!.newPage();
    await tab.goto(`${url}/lease-console`);
    await tab.fill('#credentials input[data-header="x-console-token"]', 'secret');
    await tab.locator('#credentials input[data-header="x-console-token"]').dispatchEvent('change');
    const row = `#holders tr[data-key="${key}"]`;
    await tab.locator(row).waitFor({ timeout: 15_000 });
    const box = (await tab.locator(`${row} button[data-action="timeline"]`).boundingBox())!;
    const age = await tab.locator(row).locator('td').nth(3).textContent();
    // Press, let a refresh redraw the row (its age changes every 2 s), release: one click, as a person makes it.
    await tab.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await tab.mouse.down();
    await tab.waitForFunction(
      ([selector, before]) => document.querySelector(selector)?.querySelectorAll('td')[3]?.textContent !== before,
      [row, age] as const,
      { timeout: 15_000 },
    );
    await tab.mouse.up();
    await tab.waitForFunction((picked) => document.getElementById('timeline-key')?.textContent === picked, key, {
      timeout: 5_000,
    });
    await Promise.all(held.splice(0).map((l) => l.release()));
    await tab.close();
  }, 60_000);
});
