import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { chromium } from 'playwright-core';
import { type DemoStack, startStack } from '../../apps/demo/scripts/stack.js';
import { adminClient, createTestDatabase, eventually } from '../support/db.js';
import { ensureDemoBuilt } from './support.js';

// The demo's scheduled job (issue 12): both compiled instances fire the digest every second; one of them runs each
// tick under the digest's lease, the other skips quietly; the dashboard shows the runs.

const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const SCREENSHOT = join(process.cwd(), 'artifacts', 'demo-digest.png');

let db: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
let stack: DemoStack | undefined;
let client: pg.Client | undefined;

beforeAll(async () => {
  await ensureDemoBuilt();
  db = await createTestDatabase('digest');
  stack = await startStack({ databaseUrl: db.url, digestCron: '* * * * * *' });
  client = await adminClient(db.url);
}, 240_000);

afterAll(async () => {
  await client?.end();
  await stack?.stop();
  await db?.drop();
});

interface DigestRow {
  fencing_token: string;
  instance: string;
  at_ms: number;
}

test('one digest per tick across both instances, each under its lease; the other instance skips without an error', async () => {
  const rows = await eventually(
    async () =>
      (
        await client!.query<DigestRow>(
          `SELECT fencing_token::text, instance, extract(epoch FROM created_at) * 1000 AS at_ms
           FROM job_digest ORDER BY created_at`,
        )
      ).rows,
    (found) => found.length >= 6,
    'six digests',
    30_000,
  );
  // Without the hold and the skip, two instances would write about two rows a second.
  const spanSeconds = (Number(rows.at(-1)!.at_ms) - Number(rows[0].at_ms)) / 1000;
  expect(rows.length).toBeLessThanOrEqual(Math.floor(spanSeconds) + 2);
  // In the order they were written, each under a newer lease than the one before.
  const tokens = rows.map((row) => BigInt(row.fencing_token));
  expect(tokens).toEqual([...tokens].sort((a, b) => (a < b ? -1 : 1)));
  expect(new Set(tokens).size).toBe(tokens.length);

  for (const url of Object.values(stack!.urls)) {
    const state = (await (await fetch(`${url}/api/state`)).json()) as {
      digest: { schedule: string; runs: Array<{ fencingToken: string }> };
    };
    expect(state.digest.schedule).toBe('* * * * * *');
    const shown = state.digest.runs.map((run) => BigInt(run.fencingToken));
    expect(shown.length).toBeGreaterThan(0);
    // Newest first, each one a row of the table (the database's view, whichever instance ran it).
    expect(shown).toEqual([...shown].sort((a, b) => (a > b ? -1 : 1)));
    const stored = (await client!.query<{ t: string }>('SELECT fencing_token::text AS t FROM job_digest')).rows.map(
      (row) => BigInt(row.t),
    );
    for (const token of shown) expect(stored).toContain(token);
  }
  const events = await Promise.all(
    Object.values(stack!.urls).map(
      async (url) =>
        ((await (await fetch(`${url}/api/state`)).json()) as { events: Array<{ type: string; targetKey?: string }> })
          .events,
    ),
  );
  // Every tick, the instance that did not run saw the target busy: a quiet skip, recorded as a lease event.
  // On failure, which instance wrote each row and what each saw of the key tell a late timer from a lost event.
  const seen = {
    busy: events.flat().some((event) => event.type === 'busy' && event.targetKey === 'digest:reports'),
    writers: rows.map((row) => row.instance).join(''),
    eventsOfTheKey: events.map((list) =>
      list
        .filter((event) => event.targetKey === 'digest:reports')
        .map((event) => event.type)
        .join(' '),
    ),
  };
  expect(seen).toEqual({ ...seen, busy: true });
  expect(events.flat().filter((event) => event.type === 'digest-saved').length).toBeGreaterThan(0);
  expect(stack!.output()).not.toMatch(/ERROR|WARN/);
  const page = await (await fetch(`${stack!.urls.A}/`)).text();
  expect(page).toContain('id="digests"');
});

(process.env.SKIP_BROWSER_TESTS === '1' ? test.skip : test)(
  'the dashboard lists the digests, newest first',
  async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`No Chromium at ${CHROMIUM}: set CHROMIUM_PATH or SKIP_BROWSER_TESTS=1`);
    const profile = mkdtempSync(join(tmpdir(), 'demo-digest-chromium-'));
    const context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1280, height: 900 },
      args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-sync'],
    });
    try {
      const page = context.pages()[0] ?? (await context.newPage());
      await page.goto(`${stack!.urls.B}/`);
      await page.locator('#digests tr[data-token]').nth(2).waitFor({ timeout: 15_000 });
      expect(await page.locator('#digest-schedule').textContent()).toBe('(cron * * * * * *)');
      const shown = await page
        .locator('#digests tr[data-token]')
        .evaluateAll((rows) => rows.map((row) => BigInt((row as HTMLElement).dataset.token!)));
      expect(shown).toEqual([...shown].sort((a, b) => (a > b ? -1 : 1)));
      await page.locator('#digests').scrollIntoViewIfNeeded();
      await page.screenshot({ path: SCREENSHOT, fullPage: true });
    } finally {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    }
  },
);
