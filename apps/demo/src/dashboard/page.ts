/** The dashboard's markup; `client.ts` (compiled next to this file) fills it in and refreshes it every 300 ms. */
export const DASHBOARD_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>nest-pg-lease demo</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1d2433; background: #f6f7f9; }
  h1 { font-size: 1.3rem; margin: 0 0 .3rem; } h2 { font-size: 1rem; margin: 1.2rem 0 .4rem; }
  .muted { color: #667085; }
  section { background: #fff; border: 1px solid #e4e7ec; border-radius: 8px; padding: .8rem 1rem; margin-bottom: 1rem; }
  table { border-collapse: collapse; width: 100%; } th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid #eef0f3; }
  th { font-weight: 600; color: #475467; font-size: .85rem; }
  td.num { font-variant-numeric: tabular-nums; }
  .bar { display: inline-block; width: 160px; height: 10px; background: #eef0f3; border-radius: 5px; overflow: hidden; vertical-align: middle; }
  .bar > span { display: block; height: 100%; background: #12b76a; transition: width .25s linear; }
  .bar > span.warn { background: #f79009; } .bar > span.late { background: #f04438; }
  .instance { display: inline-block; margin-right: 1rem; } .up { color: #12b76a; } .down { color: #f04438; }
  button { font: inherit; padding: .3rem .7rem; border-radius: 6px; border: 1px solid #d0d5dd; background: #fff; cursor: pointer; }
  button.primary { background: #1570ef; color: #fff; border-color: #1570ef; } button.danger { color: #b42318; border-color: #fda29b; }
  input, select { font: inherit; padding: .25rem .4rem; width: 6rem; }
  #answer[data-status^="2"] { color: #067647; } #answer[data-status^="4"], #answer[data-status^="5"], #answer[data-status="error"] { color: #b42318; }
  tr[data-type="taken-over"], tr[data-type="lost"], tr[data-type="report-discarded"] { background: #fff6ed; }
  tr[data-type="busy"] { color: #667085; } tr[data-type="digest-saved"] { background: #f0f9ff; }
</style>
</head>
<body>
<h1>nest-pg-lease demo <span class="muted" id="self"></span></h1>
<div class="muted">Heartbeat leases in PostgreSQL rows: one report per user at a time, across instances. Fencing tokens only grow.</div>

<section>
  <div id="instances"></div>
</section>

<section>
  <label>User <input id="user" type="number" min="1" value="1"></label>
  <label>via <select id="via"></select></label>
  <label>scoring latency <input id="latency" type="number" min="0" step="500" value="8000"> ms</label>
  <label>priority <input id="priority-value" type="number" value="10"></label>
  <div style="margin-top:.6rem">
    <button class="primary" id="start">Start report</button>
    <button id="start-priority">High-priority report (waits its turn)</button>
    <button id="start-sync">Build now (synchronous)</button>
    <button id="start-urgent">Urgent rebuild (preempts a running one)</button>
  </div>
  <p>Last answer: <span id="answer">-</span></p>
</section>

<section>
  <h2>Leases</h2>
  <table id="leases"><thead><tr><th>target</th><th>holder</th><th>fencing token</th><th>age</th><th>since heartbeat (bar fills toward the timeout)</th></tr></thead><tbody></tbody></table>
  <h2>Waiters, in grant order</h2>
  <table id="waiters"><thead><tr><th>target</th><th>#</th><th>instance</th><th>priority</th><th>waiting for</th><th>live</th></tr></thead><tbody></tbody></table>
</section>

<section id="console">
  <h2>Operator's console</h2>
  <div class="muted">Holders, waiters, slots, leaders, drains, a key's timeline and force-release, with confirmation:
    the page <code>LeaseConsoleModule</code> serves at <a href="/lease-console" id="console-link">/lease-console</a>
    (token: <code>CONSOLE_TOKEN</code>, <code>demo-operator-token</code> by default).</div>
</section>

<section>
  <h2>Scheduled job: digest <span class="muted" id="digest-schedule"></span></h2>
  <div class="muted"><code>@Cron</code> + <code>@Exclusive('digest:reports', { holdAtLeastMs: 800, onBusy: 'skip' })</code>
    on every instance: one of them runs each tick, the others skip quietly (a <i>busy</i> event, no error).</div>
  <table id="digests"><thead><tr><th>time</th><th>instance</th><th>fencing token</th><th>new reports</th></tr></thead><tbody></tbody></table>
</section>

<section>
  <h2>Recent events</h2>
  <table id="events"><thead><tr><th>time</th><th>instance</th><th>event</th><th>target</th><th>fencing token</th><th>detail</th></tr></thead><tbody></tbody></table>
</section>
<script type="module" src="/dashboard.js"></script>
</body>
</html>
`;
