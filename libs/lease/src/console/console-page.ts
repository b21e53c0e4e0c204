/**
 * The operator's console page (docs/console.md, "The page"): one self-contained HTML document — its style and script
 * inline, nothing from a CDN, no build step — that `LeaseConsoleModule` serves at its root path. It reads and acts
 * through the console's own JSON routes. Its Content-Security-Policy allows exactly its own style and script (by
 * their SHA-256 hashes, fixed at build time: no nonce to thread through), requests to its own origin, and no framing.
 */
import { createHash } from 'node:crypto';
import { CONSOLE_SCRIPT } from './console-page.script.js';

const STYLE = `
  :root { color-scheme: light; --line: #e4e7ec; --muted: #667085; --danger: #b42318; --ok: #067647; }
  body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5rem; color: #1d2433; background: #f6f7f9; }
  h1 { font-size: 1.3rem; margin: 0 0 .2rem; } h2 { font-size: 1rem; margin: 0 0 .5rem; }
  section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: .8rem 1rem; margin: 0 0 1rem; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid #eef0f3; vertical-align: top; }
  th { font-weight: 600; color: #475467; font-size: .85rem; }
  td { overflow-wrap: break-word; }
  .muted, tbody td[colspan] { color: var(--muted); }
  button { font: inherit; padding: .2rem .6rem; border-radius: 6px; border: 1px solid #d0d5dd; background: #fff;
    cursor: pointer; margin: 0 .3rem .2rem 0; }
  button.danger { color: var(--danger); border-color: #fda29b; }
  button.primary { background: #b42318; color: #fff; border-color: #b42318; }
  input { font: inherit; padding: .2rem .4rem; }
  label { margin-right: 1rem; }
  meter { width: 9rem; vertical-align: middle; }
  .slot { display: block; }
  [data-status="error"] { color: var(--danger); } [data-status="done"], [data-status="ok"] { color: var(--ok); }
  dialog { border: 1px solid var(--line); border-radius: 8px; max-width: 36rem; }
  dialog label { display: block; margin: .5rem 0; } dialog input { width: 100%; box-sizing: border-box; }
`;

/** The document; `__CONFIG__` is replaced per console by its configuration, as a JSON data block (never executed). */
const DOCUMENT = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>nest-pg-lease console</title>
<style>${STYLE}</style>
</head>
<body>
<header>
  <h1>nest-pg-lease console</h1>
  <p class="muted">Leases in PostgreSQL rows, as the database holds them now. <span id="status" data-status="loading">Loading…</span></p>
  <p id="credentials" hidden></p>
  <p>Last action: <span id="answer" data-status="none">-</span></p>
</header>
<section>
  <h2>Holders</h2>
  <table id="holders"><thead><tr><th>key</th><th>holder</th><th>fencing token</th><th>held for</th>
    <th>since its heartbeat / timeout</th><th></th></tr></thead><tbody></tbody></table>
</section>
<section>
  <h2>Waiters, in grant order</h2>
  <table id="waiters"><thead><tr><th>key</th><th>#</th><th>waiter</th><th>priority</th><th>effective</th>
    <th>waiting for</th><th>live</th></tr></thead><tbody></tbody></table>
</section>
<section>
  <h2>Semaphore slots</h2>
  <table id="slots"><thead><tr><th>key</th><th>slots held</th><th>holders</th><th></th></tr></thead>
    <tbody></tbody></table>
</section>
<section>
  <h2>Leaders <span class="muted">(the elections this instance takes part in)</span></h2>
  <table id="leaders"><thead><tr><th>key</th><th>kind</th><th>leader</th><th>fencing token</th><th>term</th>
    <th>candidates in line</th><th>this instance</th></tr></thead><tbody></tbody></table>
</section>
<section>
  <h2>Drains in force</h2>
  <form id="drain-form" hidden><label>key or template <input id="drain-input" required></label>
    <label><input id="drain-template" type="checkbox"> a key template</label>
    <button type="submit" class="danger">Drain…</button></form>
  <table id="drains"><thead><tr><th>kind</th><th>subject</th><th>by</th><th>reason</th><th>since</th><th></th></tr>
    </thead><tbody></tbody></table>
</section>
<section>
  <h2>Timeline of <code id="timeline-key">-</code> <span class="muted">(journaled by processes with
    observability.journal, and force-releases)</span></h2>
  <form id="timeline-form"><label>key <input id="timeline-input"></label><button type="submit">Show</button></form>
  <table id="timeline"><thead><tr><th>time</th><th>event</th><th>by</th><th>fencing token</th><th>detail</th></tr>
    </thead><tbody></tbody></table>
</section>
<section>
  <h2>Operator actions <span class="muted">(the audit trail, newest first)</span></h2>
  <table id="audit"><thead><tr><th>time</th><th>action</th><th>subject</th><th>by</th><th>reason</th><th>holder</th>
    <th>fencing token</th></tr></thead><tbody></tbody></table>
</section>
<dialog id="confirm">
  <h2>Confirm</h2>
  <p id="confirm-text"></p>
  <label>You (recorded as the operator) <input id="confirm-by" autocomplete="username"></label>
  <label>Reason (recorded in the audit trail) <input id="confirm-reason"></label>
  <p id="confirm-problem" data-status="none"></p>
  <button type="button" id="confirm-yes" class="primary">Confirm</button>
  <button type="button" id="confirm-no">Cancel</button>
</dialog>
<script type="application/json" id="console-config">__CONFIG__</script>
<script>${CONSOLE_SCRIPT}</script>
</body>
</html>
`;

const sha256 = (text: string) => `'sha256-${createHash('sha256').update(text, 'utf8').digest('base64')}'`;

/**
 * What the page may load and do: its own inline style and script (by hash), requests to its own origin (the JSON
 * routes), nothing else — no other script, no plugin, no form posting anywhere, no `<base>`, never inside a frame.
 */
export const CONSOLE_PAGE_CSP = [
  "default-src 'none'",
  `script-src ${sha256(CONSOLE_SCRIPT)}`,
  `style-src ${sha256(STYLE)}`,
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** The response headers of the page: its policy, and no sniffing, caching, referrer or framing. */
export const CONSOLE_PAGE_HEADERS: Readonly<Record<string, string>> = {
  'Content-Type': 'text/html; charset=utf-8',
  'Content-Security-Policy': CONSOLE_PAGE_CSP,
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'no-referrer',
  'Cache-Control': 'no-store',
};

/** What the page needs to know of its console: whether the actions are mounted, the headers the guard reads. */
export interface ConsolePageConfig {
  readonly actions: boolean;
  readonly headers: readonly string[];
}

/** The page of one console: its configuration as JSON inside a data block (`<` escaped: it cannot end the block). */
export function consolePage(config: ConsolePageConfig): string {
  const json = JSON.stringify({ actions: config.actions, headers: config.headers }).replace(/</g, '\\u003c');
  return DOCUMENT.replace('__CONFIG__', () => json);
}
