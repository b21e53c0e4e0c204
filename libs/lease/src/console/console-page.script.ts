/**
 * The console page's script (README / docs/console.md, "The page"), served inline and allowed by its hash in the
 * page's Content-Security-Policy (console-page.ts). Plain ES2020 for any current browser, no build step, no library.
 * Every value from the server — keys, owners, reasons: user data — reaches the page through `textContent`,
 * `setAttribute` or a `<meter>`'s value, never as markup. Writes are JSON `fetch`es from the page's own origin, which
 * is what the console's request rule lets through (console-request.guard.ts) and what a foreign page cannot send.
 */
export const CONSOLE_SCRIPT = String.raw`(function () {
  'use strict';
  var config = JSON.parse(document.getElementById('console-config').textContent);
  // The page is served at the console's root path: every route is relative to it, whatever prefix the app adds.
  var base = location.pathname.replace(/\/+$/, '');
  var REFRESH_MS = 2000;
  var state = { leases: [], leaders: [], drains: [], audit: [], timelineKey: '', timeline: [], pending: null };
  var stored = function (name) { return sessionStorage.getItem('nest-pg-lease-console:' + name) || ''; };
  var store = function (name, value) { sessionStorage.setItem('nest-pg-lease-console:' + name, value); };
  var $ = function (id) { return document.getElementById(id); };

  function el(tag, text, attributes) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    for (var name in attributes || {}) {
      if (attributes[name] !== undefined) node.setAttribute(name, String(attributes[name]));
    }
    return node;
  }
  function row(cells, attributes) {
    var tr = el('tr', null, attributes);
    cells.forEach(function (cell) {
      var td = el('td');
      if (cell instanceof Node) td.appendChild(cell);
      else td.textContent = cell === undefined || cell === null ? '' : String(cell);
      tr.appendChild(td);
    });
    return tr;
  }
  // A refresh redraws only the rows and cells that changed: a button pressed across a refresh is still the node the
  // press began on when it is released, so its click lands (a replaced button would lose it).
  function fill(id, rows, columns, empty) {
    var body = $(id).querySelector('tbody');
    if (!rows.length) {
      rows = [row([empty])];
      rows[0].firstChild.setAttribute('colspan', String(columns));
    }
    var old = Array.prototype.slice.call(body.children);
    rows.forEach(function (fresh, i) {
      var current = old[i];
      if (!current) return body.appendChild(fresh);
      if (current.isEqualNode(fresh)) return;
      if (current.children.length !== fresh.children.length) return body.replaceChild(fresh, current);
      Array.prototype.slice.call(current.attributes).forEach(function (attribute) {
        if (!fresh.hasAttribute(attribute.name)) current.removeAttribute(attribute.name);
      });
      Array.prototype.slice.call(fresh.attributes).forEach(function (attribute) {
        current.setAttribute(attribute.name, attribute.value);
      });
      Array.prototype.slice.call(fresh.children).forEach(function (cell, j) {
        if (!current.children[j].isEqualNode(cell)) current.replaceChild(cell, current.children[j]);
      });
    });
    old.slice(rows.length).forEach(function (stale) { body.removeChild(stale); });
  }
  function button(label, action, key, extra) {
    var attributes = { type: 'button', 'data-action': action, 'data-key': key };
    for (var name in extra || {}) attributes[name] = extra[name];
    return el('button', label, attributes);
  }
  function group(nodes) {
    var span = el('span');
    nodes.forEach(function (node) { if (node) span.appendChild(node); });
    return span;
  }
  var seconds = function (ms) { return (ms / 1000).toFixed(1) + ' s'; };
  var clock = function (at) { return String(at).replace('T', ' ').slice(0, 23); };
  function heartbeat(lease) {
    var meter = el('meter', null, { min: 0, max: lease.timeoutMs, low: lease.timeoutMs / 2, high: lease.timeoutMs * 0.9 });
    meter.value = Math.min(lease.sinceHeartbeatMs, lease.timeoutMs);
    return group([meter, el('span', ' ' + seconds(lease.sinceHeartbeatMs) + ' / ' + seconds(lease.timeoutMs) +
      (lease.live ? '' : ' (expired: can be taken over)'))]);
  }

  function headers() {
    var sent = {};
    config.headers.forEach(function (name) { if (stored(name)) sent[name] = stored(name); });
    return sent;
  }
  function answer(response) {
    return response.text().then(function (text) {
      var body;
      try { body = JSON.parse(text); } catch (error) { body = { message: text }; }
      if (!response.ok) throw new Error(response.status + ' ' + ((body && body.message) || response.statusText));
      return body;
    });
  }
  function get(path) {
    return fetch(base + '/' + path, { headers: headers(), credentials: 'same-origin', cache: 'no-store' }).then(answer);
  }
  function post(path, body) {
    var sent = headers();
    sent['content-type'] = 'application/json';
    return fetch(base + '/' + path, {
      method: 'POST', headers: sent, credentials: 'same-origin', body: JSON.stringify(body),
    }).then(answer);
  }
  function say(id, status, text) {
    $(id).setAttribute('data-status', status);
    $(id).textContent = text;
  }

  function render() {
    var held = state.leases.filter(function (l) { return l.state === 'held'; });
    var single = held.filter(function (l) { return l.slot === undefined; });
    fill('holders', single.map(function (l) {
      // A read-write lease's holder shows its mode; force-release frees a key's own row, which it has not.
      return row([l.mode ? l.targetKey + ' (' + l.mode + ')' : l.targetKey, el('span', l.owner, { title: l.owner }),
        l.fencingToken, seconds(l.ageMs), heartbeat(l),
        group([config.actions && !l.mode ? button('Force-release', 'force-release', l.targetKey, { 'data-holder': l.owner,
          'data-token': l.fencingToken, class: 'danger' }) : null, button('Timeline', 'timeline', l.targetKey),
        config.actions ? button('Drain', 'drain', l.targetKey) : null])],
        { 'data-key': l.targetKey, 'data-owner': l.owner, 'data-token': l.fencingToken, 'data-live': l.live });
    }), 6, 'No lease is held.');
    var waiting = state.leases.filter(function (l) { return l.state === 'waiting'; });
    fill('waiters', waiting.map(function (l) {
      return row([l.targetKey, l.position === undefined ? '-' : l.position, l.owner, l.priority, l.effectivePriority,
        seconds(l.ageMs), l.live ? 'yes' : 'no (dead: skipped)'], { 'data-key': l.targetKey, 'data-owner': l.owner });
    }), 7, 'Nobody is waiting.');
    var slots = {};
    held.filter(function (l) { return l.slot !== undefined; }).forEach(function (l) {
      (slots[l.targetKey] = slots[l.targetKey] || []).push(l);
    });
    fill('slots', Object.keys(slots).sort().map(function (key) {
      var holders = slots[key].sort(function (a, b) { return a.slot - b.slot; });
      return row([key, holders.length, group(holders.map(function (l) {
        return el('span', 'slot ' + l.slot + ': ' + l.owner + ' (' + l.fencingToken + ', ' + seconds(l.ageMs) + ')',
          { class: 'slot', 'data-slot': l.slot });
      })), button('Timeline', 'timeline', key)], { 'data-key': key, 'data-held': holders.length });
    }), 4, 'No semaphore slot is held.');
    fill('leaders', state.leaders.map(function (e) {
      var leader = held.filter(function (l) { return l.targetKey === e.targetKey; })[0];
      var candidates = waiting.filter(function (l) { return l.targetKey === e.targetKey && l.live; }).length;
      return row([e.targetKey, e.sticky ? '@Sticky owner' : 'election', leader ? leader.owner : 'none (vacant)',
        leader ? leader.fencingToken : '', leader ? seconds(leader.ageMs) : '', candidates,
        e.leading ? 'leads' : 'candidate'], { 'data-key': e.targetKey, 'data-leader': leader ? leader.owner : '' });
    }), 7, 'This instance takes part in no election.');
    fill('drains', state.drains.map(function (d) {
      return row([d.kind, d.subject, d.actor, d.reason, clock(d.at), config.actions ? button('Undrain', 'undrain',
        d.subject, { 'data-template': d.kind === 'template' }) : ''], { 'data-kind': d.kind, 'data-subject': d.subject });
    }), 6, 'No drain in force.');
    $('timeline-key').textContent = state.timelineKey || '-';
    fill('timeline', state.timeline.map(function (t) {
      return row([clock(t.at), t.type, t.owner, t.fencingToken, t.detail],
        { 'data-type': t.type, 'data-owner': t.owner, 'data-token': t.fencingToken, 'data-detail': t.detail });
    }), 5, state.timelineKey ? 'Nothing journaled for this key yet.' : 'Pick a key (Timeline).');
    fill('audit', state.audit.map(function (a) {
      return row([clock(a.at), a.action, a.subject || a.targetKey, a.actor, a.reason, a.holder, a.fencingToken],
        { 'data-action': a.action });
    }), 7, 'No operator action yet.');
  }

  function refresh() {
    var reads = [get('leases'), get('leaders'), get('drains'), get('audit?limit=20')];
    if (state.timelineKey) reads.push(get('history?limit=100&key=' + encodeURIComponent(state.timelineKey)));
    return Promise.all(reads).then(function (got) {
      state.leases = got[0];
      state.leaders = got[1];
      state.drains = got[2];
      state.audit = got[3];
      state.timeline = got[4] || [];
      say('status', 'ok', 'Updated ' + new Date().toLocaleTimeString());
      render();
    }, function (error) {
      say('status', 'error', 'Could not read the console: ' + error.message +
        (config.headers.length ? ' (check the credentials above)' : ''));
    });
  }
  function loop() {
    refresh().then(function () { setTimeout(loop, REFRESH_MS); });
  }

  // The confirmation step: every action names what it will do and needs a reason before it is sent.
  var descriptions = {
    'force-release': function (p) {
      return 'Force-release "' + p.key + '": end the grant of ' + p.holder + ' (fencing token ' + p.token +
        '). Its work is told to stop and its fenced writes are refused; the key is free at once.';
    },
    drain: function (p) {
      return 'Drain ' + (p.template ? 'every key of the template "' : '"') + p.key + '": refuse new acquisitions in ' +
        'every process until it is undrained. Holders keep their leases.';
    },
    undrain: function (p) { return 'Undrain "' + p.key + '": acquisitions are granted again.'; },
  };
  function confirmAction(pending) {
    state.pending = pending;
    $('confirm-text').textContent = descriptions[pending.action](pending);
    $('confirm-reason').value = '';
    $('confirm-by').value = stored('by');
    $('confirm').showModal();
  }
  function send() {
    var p = state.pending;
    var by = $('confirm-by').value.trim();
    var reason = $('confirm-reason').value.trim();
    if (!by || !reason) {
      say('confirm-problem', 'error', 'Name yourself and give a reason: both are written to the audit trail.');
      return;
    }
    store('by', by);
    $('confirm').close();
    state.pending = null;
    var body = p.action === 'force-release' ? { targetKey: p.key, by: by, reason: reason }
      : { subject: p.key, template: p.template, by: by, reason: reason };
    $('answer').setAttribute('data-action', p.action);
    say('answer', 'sending', p.action + ' "' + p.key + '" …');
    post(p.action, body).then(function (result) {
      say('answer', 'done', p.action + ' "' + p.key + '": ' + JSON.stringify(result));
      return refresh();
    }, function (error) {
      say('answer', 'error', p.action + ' "' + p.key + '" refused: ' + error.message);
    });
  }

  document.addEventListener('click', function (event) {
    var target = event.target.closest ? event.target.closest('button') : null;
    if (!target) return;
    var action = target.getAttribute('data-action');
    var key = target.getAttribute('data-key');
    if (action === 'timeline') {
      state.timelineKey = key;
      $('timeline-input').value = key;
      refresh();
    } else if (action === 'force-release') {
      confirmAction({ action: action, key: key, holder: target.getAttribute('data-holder'),
        token: target.getAttribute('data-token') });
    } else if (action === 'drain' || action === 'undrain') {
      confirmAction({ action: action, key: key, template: target.getAttribute('data-template') === 'true' });
    } else if (target.id === 'confirm-yes') send();
    else if (target.id === 'confirm-no') {
      state.pending = null;
      $('confirm').close();
    }
  });
  $('timeline-form').addEventListener('submit', function (event) {
    event.preventDefault();
    state.timelineKey = $('timeline-input').value.trim();
    refresh();
  });
  $('drain-form').addEventListener('submit', function (event) {
    event.preventDefault();
    var subject = $('drain-input').value.trim();
    if (subject) confirmAction({ action: 'drain', key: subject, template: $('drain-template').checked });
  });

  // The credentials the app's guard reads (LeaseConsoleModule's page.headers), kept for this tab only.
  var credentials = $('credentials');
  config.headers.forEach(function (name) {
    var secret = /token|auth|secret|key|session|cookie/i.test(name);
    var input = el('input', null, { type: secret ? 'password' : 'text', 'data-header': name, autocomplete: 'off' });
    input.value = stored(name);
    input.addEventListener('input', function () { store(name, input.value); });
    input.addEventListener('change', function () { store(name, input.value); refresh(); });
    var label = el('label', name + ' ');
    label.appendChild(input);
    credentials.appendChild(label);
  });
  credentials.hidden = config.headers.length === 0;
  $('drain-form').hidden = !config.actions;
  document.body.setAttribute('data-actions', String(config.actions));
  loop();
})();
`;
