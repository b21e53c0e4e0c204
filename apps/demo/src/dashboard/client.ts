// Runs in the browser (served as /dashboard.js). Polls every instance's /api/state and renders it.
interface Snapshot {
  targetKey: string;
  state: 'held' | 'waiting';
  owner: string;
  priority: number;
  fencingToken?: string;
  /** A semaphore's slot (limit above 1). */
  slot?: number;
  position?: number;
  ageMs: number;
  sinceHeartbeatMs: number;
  timeoutMs: number;
  live: boolean;
}
interface Activity {
  seq: number;
  at: string;
  instance: string;
  type: string;
  targetKey?: string;
  fencingToken?: string;
  detail?: string;
}
interface DigestRun {
  fencingToken: string;
  instance: string;
  reports: number;
  at: string;
}
interface State {
  instance: string;
  pid: number;
  leaseTimeoutMs: number;
  peers: Record<string, string>;
  leases: Snapshot[];
  events: Activity[];
  digest: { schedule: string; runs: DigestRun[] };
}

const REFRESH_MS = 300;
const SHOWN_EVENTS = 40;

let peers: Record<string, string> = {};
let self = '';
const up = new Map<string, { pid: number } | null>();
/** Events by instance incarnation (name + pid), so a restarted instance's numbering starts afresh. */
const events = new Map<string, Activity>();
const lastSeq = new Map<string, number>();
let leases: Snapshot[] = [];
let digest: State['digest'] = { schedule: '', runs: [] };

const $ = <T extends HTMLElement>(selector: string) => document.querySelector(selector) as T;
const escape = (text: string | number | null | undefined) =>
  String(text ?? '').replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  );
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const holderOf = (owner: string) => owner.split('/')[0];

async function fetchState(url: string, after: number): Promise<State> {
  const response = await fetch(`${url}/api/state?after=${after}`, { signal: AbortSignal.timeout(1_500) });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  return (await response.json()) as State;
}

function absorb(name: string, state: State): void {
  up.set(name, { pid: state.pid });
  const incarnation = `${name}:${state.pid}`;
  for (const event of state.events) events.set(`${incarnation}:${event.seq}`, event);
  const newest = state.events.at(-1)?.seq;
  if (newest !== undefined) lastSeq.set(incarnation, newest);
}

async function refresh(): Promise<void> {
  if (!self) {
    const own = await fetchState('', 0);
    self = own.instance;
    peers = own.peers;
    renderControls();
  }
  const results = await Promise.allSettled(
    Object.entries(peers).map(async ([name, url]) => {
      const known = up.get(name);
      const after = known ? (lastSeq.get(`${name}:${known.pid}`) ?? 0) : 0;
      const state = await fetchState(url, after);
      if (known && known.pid !== state.pid) lastSeq.delete(`${name}:${known.pid}`);
      absorb(name, state);
      return state;
    }),
  );
  let fresh: State | undefined;
  Object.keys(peers).forEach((name, index) => {
    const result = results[index];
    if (result.status === 'fulfilled') fresh ??= result.value;
    else up.set(name, null);
  });
  // The lease and digest tables are the database's view: any live instance can tell them.
  if (fresh) ({ leases, digest } = fresh);
  render();
}

function renderControls(): void {
  $('#self').textContent = `— page served by instance ${self}`;
  $<HTMLSelectElement>('#via').innerHTML = Object.keys(peers)
    .map((name) => `<option value="${escape(name)}"${name === self ? ' selected' : ''}>${escape(name)}</option>`)
    .join('');
}

/** The instances' panel as last written: rewritten only when it changes, so a click on its buttons is never lost. */
let instancesHtml = '';

function render(): void {
  // A click is a press and a release on one element: rewriting the panel between the two (every refresh) lost the
  // click on "Kill A" now and then. Unchanged, it is left as it is.
  const instances = Object.entries(peers)
    .map(([name, url]) => {
      const state = up.get(name);
      const status = state ? 'up' : 'down';
      return `<span class="instance" data-instance="${escape(name)}" data-status="${status}">
        <b>${escape(name)}</b> <span class="${status}">● ${status}</span> <span class="muted">${escape(url)}${state ? ` pid ${state.pid}` : ''}</span>
        <button class="danger" id="kill-${escape(name)}" data-kill="${escape(name)}"${state ? '' : ' disabled'}>Kill ${escape(name)}</button></span>`;
    })
    .join('');
  if (instances !== instancesHtml) $('#instances').innerHTML = instancesHtml = instances;

  const held = leases.filter((row) => row.state === 'held');
  $('#leases tbody').innerHTML =
    held
      .map((row) => {
        const fill = Math.min(100, Math.round((row.sinceHeartbeatMs / row.timeoutMs) * 100));
        const tone = fill >= 100 ? 'late' : fill >= 50 ? 'warn' : '';
        return `<tr data-target="${escape(row.targetKey)}" data-holder="${escape(holderOf(row.owner))}" data-token="${escape(row.fencingToken)}" data-live="${row.live}">
          <td>${escape(row.targetKey)}${row.slot === undefined ? '' : ` <span class="muted" data-slot="${row.slot}">slot ${row.slot}</span>`}</td><td title="${escape(row.owner)}">${escape(holderOf(row.owner))}</td>
          <td class="num">${escape(row.fencingToken)}</td><td class="num age">${seconds(row.ageMs)}</td>
          <td><span class="bar"><span class="${tone}" style="width:${fill}%" data-fill="${fill}"></span></span>
          <span class="muted num">${seconds(row.sinceHeartbeatMs)} / ${seconds(row.timeoutMs)}${row.live ? '' : ' — expired, can be taken over'}</span></td></tr>`;
      })
      .join('') || '<tr><td colspan="5" class="muted">no leases held</td></tr>';

  const waiting = leases.filter((row) => row.state === 'waiting');
  $('#waiters tbody').innerHTML =
    waiting
      .map(
        (
          row,
        ) => `<tr data-target="${escape(row.targetKey)}" data-priority="${row.priority}" data-position="${row.position ?? ''}">
          <td>${escape(row.targetKey)}</td><td class="num">${row.position ?? '-'}</td><td>${escape(holderOf(row.owner))}</td>
          <td class="num">${row.priority}</td><td class="num">${seconds(row.ageMs)}</td><td>${row.live ? 'yes' : 'no (skipped)'}</td></tr>`,
      )
      .join('') || '<tr><td colspan="6" class="muted">nobody waiting</td></tr>';

  $('#digest-schedule').textContent = digest.schedule === 'off' ? '(off)' : `(cron ${digest.schedule})`;
  $('#digests tbody').innerHTML =
    digest.runs
      .map(
        (run) => `<tr data-instance="${escape(run.instance)}" data-token="${escape(run.fencingToken)}">
          <td class="num">${escape(run.at.slice(11, 23))}</td><td>${escape(run.instance)}</td>
          <td class="num">${escape(run.fencingToken)}</td><td class="num">${run.reports}</td></tr>`,
      )
      .join('') || '<tr><td colspan="4" class="muted">no digest yet</td></tr>';

  const recent = [...events.values()].sort((a, b) => b.at.localeCompare(a.at)).slice(0, SHOWN_EVENTS);
  $('#events tbody').innerHTML = recent
    .map(
      (
        event,
      ) => `<tr data-type="${escape(event.type)}" data-instance="${escape(event.instance)}" data-token="${escape(event.fencingToken)}">
        <td class="num">${escape(event.at.slice(11, 23))}</td><td>${escape(event.instance)}</td><td>${escape(event.type)}</td>
        <td>${escape(event.targetKey)}</td><td class="num">${escape(event.fencingToken)}</td><td>${escape(event.detail)}</td></tr>`,
    )
    .join('');
}

async function act(path: string, body?: unknown, via = $<HTMLSelectElement>('#via').value): Promise<void> {
  const answer = $('#answer');
  try {
    const response = await fetch(`${peers[via]}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body ?? {}),
    });
    const text = await response.text();
    answer.dataset.status = String(response.status);
    answer.textContent = `${via}: ${response.status} ${response.statusText} — ${text}`;
  } catch (error) {
    answer.dataset.status = 'error';
    answer.textContent = `${via}: ${String(error)}`;
  }
}

const user = () => Number($<HTMLInputElement>('#user').value);
const latencyMs = () => Number($<HTMLInputElement>('#latency').value);

document.addEventListener('click', (event) => {
  const target = event.target as HTMLElement;
  if (target.id === 'start') void act(`/api/users/${user()}/report`, { latencyMs: latencyMs() });
  if (target.id === 'start-priority') {
    const priority = Number($<HTMLInputElement>('#priority-value').value);
    void act(`/api/admin/users/${user()}/report`, { latencyMs: latencyMs(), priority });
  }
  if (target.id === 'start-urgent') {
    const priority = Number($<HTMLInputElement>('#priority-value').value);
    void act(`/api/admin/users/${user()}/report/urgent`, { latencyMs: latencyMs(), priority });
  }
  if (target.id === 'start-sync') void act(`/api/users/${user()}/report/sync`, { latencyMs: latencyMs() });
  if (target.dataset.kill) void act('/api/kill', undefined, target.dataset.kill);
});

async function loop(): Promise<void> {
  try {
    await refresh();
  } catch (error) {
    $('#answer').textContent = `refresh failed: ${String(error)}`;
  }
  setTimeout(loop, REFRESH_MS);
}
void loop();

export {};
