import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { type DemoStack, startStack } from '../../apps/demo/scripts/stack.js';
import { adminClient, createTestDatabase } from '../support/db.js';
import { ensureDemoBuilt } from './support.js';

// The dashboard in headless Chromium (Debian's package, never a downloaded browser): start a report, see the lease
// and its heartbeat bar, see the refusal of a second click, queue a high-priority report on the other instance,
// kill the holder, watch the bar fill toward the timeout and the other instance take over. Then the operator's console
// (the page LeaseConsoleModule serves, which the dashboard links to): the key's timeline after that takeover, and a
// force-release confirmed in that page that the new holder observes as a loss (its report discarded, nothing saved). Last, an urgent rebuild clicked in the page preempts a running report:
// the recent events name both fencing tokens.

const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const SCREENSHOT = join(process.cwd(), 'artifacts', 'demo-dashboard.png');
const CONSOLE_SCREENSHOT = join(process.cwd(), 'artifacts', 'demo-console.png');
const PREEMPTION_SCREENSHOT = join(process.cwd(), 'artifacts', 'demo-preemption.png');
const skip = process.env.SKIP_BROWSER_TESTS === '1';

(skip ? describe.skip : describe)('dashboard in headless Chromium', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
  let stack: DemoStack | undefined;
  let client: pg.Client | undefined;
  let context: BrowserContext | undefined;
  let profile: string | undefined;
  let page: Page;

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) {
      throw new Error(
        `No Chromium at ${CHROMIUM}: install Debian's package (apt-get install -y chromium), set CHROMIUM_PATH, or set SKIP_BROWSER_TESTS=1`,
      );
    }
    await ensureDemoBuilt();
    db = await createTestDatabase('demo_ui');
    // A longer timeout than the tour's leaves the page several refreshes to show the bar filling after the kill.
    stack = await startStack({ databaseUrl: db.url, heartbeatIntervalMs: 500, leaseTimeoutMs: 4_000 });
    client = await adminClient(db.url);
    profile = mkdtempSync(join(tmpdir(), 'demo-chromium-'));
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1280, height: 900 },
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
    page = context.pages()[0] ?? (await context.newPage());
  }, 240_000);

  afterAll(async () => {
    await context?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
    await client?.end();
    await stack?.stop();
    await db?.drop();
  });

  const leaseRow = (holder: string) => page.locator(`#leases tr[data-target="report:user:7"][data-holder="${holder}"]`);
  const fillOf = async (holder: string) =>
    Number(await leaseRow(holder).locator('[data-fill]').getAttribute('data-fill'));

  test('start, refusal, growing heartbeat bar, kill and takeover', async () => {
    await page.goto(`${stack!.urls.B}/`);
    await page.locator('#instances [data-instance="A"][data-status="up"]').waitFor();
    await page.fill('#user', '7');
    await page.fill('#latency', '60000');
    await page.selectOption('#via', 'A');

    await page.click('#start');
    await page.locator('#answer[data-status="202"]').waitFor();
    await leaseRow('A').waitFor();
    const firstToken = BigInt((await leaseRow('A').getAttribute('data-token'))!);
    expect(await fillOf('A')).toBeLessThan(50);

    await page.click('#start');
    await page.locator('#answer[data-status="409"]').waitFor();
    expect(await page.textContent('#answer')).toContain('is busy: another request is working on it');

    // B waits its turn with priority 10; it is granted once A's lease expires.
    await page.selectOption('#via', 'B');
    await page.click('#start-priority');
    await page.locator('#answer[data-status="202"]').waitFor();
    await page.locator('#waiters tr[data-target="report:user:7"][data-priority="10"][data-position="1"]').waitFor();

    await page.click('#kill-A');
    await page.locator('#instances [data-instance="A"][data-status="down"]').waitFor({ timeout: 10_000 });
    // No heartbeats any more: A's bar fills toward the timeout (heartbeats every 500 ms kept it under 15 %).
    await page.waitForFunction(
      () => Number(document.querySelector('#leases tr[data-holder="A"] [data-fill]')?.getAttribute('data-fill')) >= 40,
      undefined,
      { timeout: 15_000, polling: 100 },
    );
    await leaseRow('B').waitFor({ timeout: 20_000 });
    const takeoverToken = BigInt((await leaseRow('B').getAttribute('data-token'))!);
    expect(takeoverToken).toBeGreaterThan(firstToken);
    await page
      .locator(`#events tr[data-type="taken-over"][data-instance="B"][data-token="${takeoverToken}"]`)
      .waitFor();

    // The page shows what the database holds.
    const { rows } = await client!.query('SELECT owner, fencing_token FROM job_lease WHERE target_id = $1', [
      'report:user:7',
    ]);
    expect(rows).toHaveLength(1);
    expect(rows[0].owner).toMatch(/^B\//);
    expect(BigInt(rows[0].fencing_token)).toBe(takeoverToken);

    mkdirSync(join(process.cwd(), 'artifacts'), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    expect(existsSync(SCREENSHOT)).toBe(true);
  }, 90_000);

  test('console (the page of the package): timeline after the takeover, force-release observed by the holder as a loss', async () => {
    // The reads are guarded: the dashboard's script cannot read them without the operator's token.
    const denied = await page.evaluate(async () => (await fetch('/lease-console/drains')).status);
    expect(denied).toBe(403);
    // The dashboard links to the page LeaseConsoleModule serves; the operator gives the token there.
    expect(await page.getAttribute('#console-link', 'href')).toBe('/lease-console');
    const consoleTab = await context!.newPage();
    await consoleTab.goto(`${stack!.urls.B}/lease-console`);
    await consoleTab.fill('#credentials input[data-header="x-console-token"]', 'demo-operator-token');
    await consoleTab.locator('#credentials input[data-header="x-console-token"]').dispatchEvent('change');
    const holder = consoleTab.locator('#holders tr[data-key="report:user:7"][data-owner^="B/"]');
    await holder.locator('button[data-action="timeline"]').click();

    // The scripted takeover of the first test, as every instance journaled it: A acquired, B queued, B took over.
    const acquired = consoleTab.locator('#timeline tr[data-type="acquired"][data-owner^="A/"]');
    await acquired.first().waitFor({ timeout: 15_000 });
    await consoleTab.locator('#timeline tr[data-type="waiting"][data-owner^="B/"]').first().waitFor();
    const takeover = consoleTab.locator('#timeline tr[data-type="taken-over"][data-owner^="B/"]');
    await takeover.waitFor();
    const firstToken = BigInt((await acquired.first().getAttribute('data-token'))!);
    const holderToken = BigInt((await takeover.getAttribute('data-token'))!);
    expect(holderToken).toBeGreaterThan(firstToken);
    expect(await takeover.getAttribute('data-detail')).toMatch(/^from A\//);

    // Force-release, confirmed in the page's dialog with the operator's name and a reason.
    await holder.locator('button[data-action="force-release"]').click();
    await consoleTab.locator('#confirm[open]').waitFor();
    expect(await consoleTab.textContent('#confirm-text')).toContain(`(fencing token ${holderToken})`);
    await consoleTab.fill('#confirm-by', 'alice');
    await consoleTab.fill('#confirm-reason', 'stuck report');
    await consoleTab.click('#confirm-yes');
    await consoleTab.locator('#answer[data-status="done"][data-action="force-release"]').waitFor();
    await consoleTab
      .locator(`#timeline tr[data-type="force-release"][data-owner="alice"][data-token="${holderToken}"]`)
      .waitFor();
    // B's next heartbeat finds the grant ended by an operator: the signal aborts, the report is discarded.
    await consoleTab
      .locator(
        `#timeline tr[data-type="lost"][data-owner^="B/"][data-token="${holderToken}"][data-detail="released-by-operator"]`,
      )
      .waitFor({ timeout: 15_000 });
    const discarded = page.locator('#events tr[data-type="report-discarded"][data-instance="B"]');
    await discarded.waitFor({ timeout: 15_000 });
    expect(await discarded.first().textContent()).toContain('released-by-operator');
    await holder.waitFor({ state: 'detached' });
    await page.locator('#leases tr[data-target="report:user:7"]').waitFor({ state: 'detached' });

    const { rows } = await client!.query(
      'SELECT action, subject, actor, reason, fencing_token::text AS token, holder FROM job_lease_audit',
    );
    expect(rows).toEqual([
      {
        action: 'force-release',
        subject: 'report:user:7',
        actor: 'alice',
        reason: 'stuck report',
        token: String(holderToken),
        holder: expect.stringMatching(/^B\//),
      },
    ]);
    const { rows: saved } = await client!.query('SELECT count(*)::int AS n FROM job_result WHERE user_id = 7');
    expect(saved[0].n).toBe(0);

    // Drain the key from the console page: a new report is refused (503) until undrained.
    await consoleTab.fill('#drain-input', 'report:user:7');
    await consoleTab.click('#drain-form button[type="submit"]');
    await consoleTab.fill('#confirm-reason', 'maintenance');
    await consoleTab.click('#confirm-yes');
    await consoleTab.locator('#answer[data-status="done"][data-action="drain"]').waitFor();
    await consoleTab.locator('#drains tr[data-kind="key"][data-subject="report:user:7"]').waitFor();
    await page.fill('#user', '7');
    await page.fill('#latency', '500');
    await page.selectOption('#via', 'B');
    await page.click('#start-sync');
    await page.locator('#answer[data-status="503"]').waitFor();
    expect(await page.textContent('#answer')).toContain('is paused by an operator');

    await consoleTab.screenshot({ path: CONSOLE_SCREENSHOT, fullPage: true });
    expect(existsSync(CONSOLE_SCREENSHOT)).toBe(true);

    await consoleTab.click('#drains tr[data-subject="report:user:7"] button[data-action="undrain"]');
    await consoleTab.fill('#confirm-reason', 'maintenance over');
    await consoleTab.click('#confirm-yes');
    await consoleTab.locator('#answer[data-status="done"][data-action="undrain"]').waitFor();
    await consoleTab.locator('#drains tr[data-kind="key"]').waitFor({ state: 'detached' });
    await consoleTab.close();
  }, 90_000);
  test('an urgent rebuild preempts a running report: both fencing tokens in the recent events', async () => {
    // A was killed in the first test: both calls go to B (its running report hears of the preemption at once).
    await page.fill('#user', '8');
    await page.fill('#latency', '60000');
    await page.selectOption('#via', 'B');
    await page.click('#start');
    const running = page.locator('#leases tr[data-target="report:user:8"][data-holder="B"]');
    await running.waitFor();
    const runningToken = (await running.getAttribute('data-token'))!;
    await page.fill('#latency', '0');
    await page.fill('#priority-value', '50');
    await page.click('#start-urgent');
    const preempted = page.locator('#events tr[data-type="preempted"][data-instance="B"]');
    await preempted.waitFor({ timeout: 15_000 });
    const urgentToken = (await preempted.first().getAttribute('data-token'))!;
    expect(BigInt(urgentToken)).toBeGreaterThan(BigInt(runningToken));
    expect(await preempted.first().textContent()).toContain(`fencing token ${runningToken} → ${urgentToken}`);
    await page.locator(`#events tr[data-type="report-discarded"][data-token="${runningToken}"]`).waitFor();
    await page.locator(`#events tr[data-type="report-saved"][data-token="${urgentToken}"]`).waitFor();
    const { rows } = await client!.query(
      'SELECT fencing_token::text AS token, priority FROM job_result WHERE user_id = 8 ORDER BY fencing_token',
    );
    expect(rows).toEqual([{ token: urgentToken, priority: 50 }]);
    await page.locator('#events').screenshot({ path: PREEMPTION_SCREENSHOT });
  }, 60_000);
});
