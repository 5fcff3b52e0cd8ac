// The dashboard (/dashboard): fleet tiles and deployment cards, updated in
// place from the live metrics feed, with Scale (PATCH
// /deployments/{id}/scaling), Edit (PUT /deployments/{id}) and Shell (a
// terminal on GET /deployments/{id}/shell, shell.js).
import { api, el, live, stateBadge } from './app.js';

const tiles = document.getElementById('tiles');
const cards = document.getElementById('deployments');
const none = document.getElementById('none');
const status = document.getElementById('live');
const filter = document.getElementById('filter');
let last = null; // {at, total}: the previous snapshot's request count
let latest = null;
let fleetWide = true; // whether the caller sees the whole fleet (GET /whoami)

const fmt = (n, d = 0) => (n === null || n === undefined || Number.isNaN(n) ? '—' : n.toLocaleString('en', { maximumFractionDigits: d }));
const ms = (v) => (v ? fmt(v, v < 10 ? 1 : 0) + ' ms' : '—');
const secs = (v) => (v ? fmt(v, 2) + ' s' : '—');

// totals sums the deployments' numbers: what a caller below the fleet sees
// of the fleet (its global numbers are its own deployments').
function totals(m) {
  const t = { requests: { total: 0, c2xx: 0, c5xx: 0, errors: 0 }, p50: 0, p99: 0, cold: 0, boots: 0 };
  for (const d of m.deployments) {
    const r = d.metrics.requests;
    t.requests.total += r.total; t.requests.c2xx += r.c2xx; t.requests.c5xx += r.c5xx; t.requests.errors += r.errors;
    t.p50 = Math.max(t.p50, d.metrics.latency_ms.p50); t.p99 = Math.max(t.p99, d.metrics.latency_ms.p99);
    t.cold = Math.max(t.cold, d.metrics.cold_start_s.p50); t.boots += d.metrics.cold_start_s.count;
  }
  return t;
}

function tile(id, label, value, note) {
  return el('div', { class: 'tile', 'data-tile': id }, el('dt', {}, label), el('dd', {}, value, note ? el('small', {}, note) : null));
}

function renderTiles(m) {
  const g = m.global;
  const t = fleetWide ? { requests: g.requests, p50: g.latency_ms.p50, p99: g.latency_ms.p99, cold: g.cold_start_s.p50, boots: g.cold_start_s.count } : totals(m);
  const now = performance.now();
  let rps = null;
  if (last && now > last.at) rps = Math.max(0, (t.requests.total - last.total) / ((now - last.at) / 1000));
  last = { at: now, total: t.requests.total };
  const bad = t.requests.c5xx + t.requests.errors;
  const f = m.fleet;
  tiles.replaceChildren(
    tile('deployments', 'Deployments', fmt(f.deployments)),
    tile('ready', 'Ready replicas', fmt(f.ready), `${f.pending} pending · ${f.draining} draining`),
    tile('inflight', 'In flight', fmt(f.total_in_flight)),
    tile('rps', 'Requests/s', rps === null ? '—' : fmt(rps, 1), `${fmt(t.requests.total)} total · ${fmt(t.requests.c2xx)} 2xx`),
    tile('latency', 'Latency p50', ms(t.p50), 'p99 ' + ms(t.p99)),
    tile('coldstart', 'Cold start p50', secs(t.cold), `${fmt(t.boots)} boots`),
    tile('errors', 'Error rate', t.requests.total ? fmt((100 * bad) / t.requests.total, 1) + ' %' : '—', `${fmt(bad)} 5xx + errors`),
  );
}

function replicas(d) {
  if (d.kind === 'site') return d.site_spa ? 'static site · SPA' : 'static site · files';
  if (d.kind === 'static') return d.upstreams.length === 1 ? 'static · proxy_pass' : `${d.upstreams.length} upstreams`;
  const p = d.pool;
  return `${p.ready}/${p.max_replicas} ready · want ${p.desired_replicas}; min ${p.min_replicas} · warm ${p.warm_pool} · target ${p.target_concurrency}`;
}

// bar is a gauge's filling, sized through the CSSOM (the pages' CSP
// refuses style attributes).
function bar(pct) {
  const s = el('span', {});
  s.style.width = Math.min(pct, 100) + '%';
  return s;
}

function card(d) {
  const li = el('li', { class: 'card', 'data-deployment': d.id });
  fill(li, d);
  return li;
}

function fill(li, d) {
  const u = d.pool.utilization;
  const pct = u === null ? null : Math.round(u * 100);
  const name = 'dep-' + d.id;
  li.replaceChildren(...[
    el('h3', { id: name }, d.id, d.namespace ? el('span', { class: 'badge' }, d.namespace) : null, stateBadge(d)),
    d.urls && d.urls.length ? el('ul', { class: 'urls' }, d.urls.map((x) => el('li', {}, el('a', { href: x }, x)))) : null,
    el('p', { class: 'meta', 'data-replicas': '' }, replicas(d)),
    el('p', { class: 'meta' }, `${d.pool.total_in_flight} in flight · ${fmt(d.metrics.requests.total)} requests · p99 ${ms(d.metrics.latency_ms.p99)}`),
    pct === null ? null : el('div', { class: 'gauge' + (pct >= 100 ? ' crit' : pct >= 80 ? ' warn' : ''), role: 'meter', 'aria-label': 'Utilization of ' + d.id, 'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': String(Math.min(pct, 100)) }, bar(pct)),
    el('div', { class: 'row actions' },
      d.kind === 'vm' ? el('button', { type: 'button', class: 'ghost', 'data-action': 'scale', 'aria-describedby': name, onclick: () => openScale(d.id) }, 'Scale') : null,
      el('button', { type: 'button', class: 'ghost', 'data-action': 'edit', 'aria-describedby': name, onclick: () => openEdit(d.id) }, 'Edit'),
      d.kind === 'vm' ? el('button', { type: 'button', class: 'ghost', 'data-action': 'shell', 'aria-describedby': name, onclick: (ev) => openShell(d.id, ev.currentTarget) }, 'Shell') : null),
  ].filter(Boolean));
}

function renderCards(m) {
  // A card is refilled in place: the button that had the focus has it
  // again afterwards (a keyboard user's place is kept).
  const f = document.activeElement;
  const had = f && f.dataset && f.dataset.action && f.closest('li.card') ? [f.closest('li.card').dataset.deployment, f.dataset.action] : null;
  const q = filter.value.trim().toLowerCase();
  const shown = m.deployments.filter((d) => !q || d.id.toLowerCase().includes(q));
  const have = new Map([...cards.children].map((li) => [li.dataset.deployment, li]));
  const order = [];
  for (const d of shown) {
    let li = have.get(d.id);
    if (li) { fill(li, d); have.delete(d.id); } else li = card(d);
    order.push(li);
  }
  for (const li of have.values()) li.remove();
  order.forEach((li, i) => { if (cards.children[i] !== li) cards.insertBefore(li, cards.children[i] || null); });
  none.hidden = m.deployments.length > 0;
  if (had && !cards.contains(document.activeElement)) {
    const b = [...cards.children].find((li) => li.dataset.deployment === had[0])?.querySelector(`[data-action="${had[1]}"]`);
    if (b) b.focus();
  }
}

function render(m) {
  latest = m;
  renderTiles(m);
  // A card's buttons are not rebuilt under an open dialog's feet.
  if (!document.querySelector('dialog[open]')) renderCards(m);
}

filter.addEventListener('input', () => latest && renderCards(latest));
for (const b of document.querySelectorAll('dialog [data-close]')) b.addEventListener('click', () => b.closest('dialog').close());

// Scale.
const scale = document.getElementById('scale');
const scaleForm = document.getElementById('scale-form');
const scaleErr = document.getElementById('scale-error');
let scaling = null;
function openScale(id) {
  const d = latest.deployments.find((x) => x.id === id);
  scaling = id;
  document.getElementById('scale-h').textContent = 'Scale ' + id;
  for (const k of ['min_replicas', 'max_replicas', 'warm_pool', 'target_concurrency']) {
    const f = scaleForm.elements[k];
    f.value = d.pool[k];
    f.removeAttribute('aria-invalid');
  }
  scaleErr.hidden = true;
  scale.showModal();
}
scaleForm.addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const patch = {};
  for (const k of ['min_replicas', 'max_replicas', 'warm_pool', 'target_concurrency']) {
    const v = scaleForm.elements[k].value.trim();
    if (v !== '') patch[k] = Number(v);
  }
  try {
    await api('PATCH', '/deployments/' + encodeURIComponent(scaling) + '/scaling', patch);
    scale.close();
  } catch (e) {
    showError(scaleErr, e.message, scaleForm, Object.keys(patch));
  }
});

// Edit.
const edit = document.getElementById('edit');
const editForm = document.getElementById('edit-form');
const editJSON = document.getElementById('edit-json');
const editErr = document.getElementById('edit-error');
let editing = null;
async function openEdit(id) {
  editing = id;
  document.getElementById('edit-h').textContent = 'Edit ' + id;
  editErr.hidden = true;
  editJSON.removeAttribute('aria-invalid');
  try {
    const st = await api('GET', '/deployments/' + encodeURIComponent(id));
    editJSON.value = JSON.stringify(st.spec, null, 2);
  } catch (e) {
    editJSON.value = '';
    showError(editErr, e.message);
  }
  edit.showModal();
}
editForm.addEventListener('submit', async (ev) => {
  ev.preventDefault();
  let spec;
  try { spec = JSON.parse(editJSON.value); } catch (e) {
    editJSON.setAttribute('aria-invalid', 'true');
    showError(editErr, 'Not valid JSON: ' + e.message);
    return;
  }
  try {
    await api('PUT', '/deployments/' + encodeURIComponent(editing), spec);
    edit.close();
  } catch (e) {
    editJSON.setAttribute('aria-invalid', 'true');
    showError(editErr, e.message);
    editJSON.focus();
  }
});

// Shell: a terminal in a replica (shell.js, loaded with xterm.js on the
// first use).
let shellModule = null;
async function openShell(id, opener) {
  shellModule ||= import('./shell.js');
  (await shellModule).openShell(id, opener);
}

// showError shows the API's message under the form, and marks the inputs
// it names (its messages name the field they refuse).
function showError(p, msg, form, fields) {
  p.textContent = msg;
  p.hidden = false;
  if (!form) return;
  for (const k of fields || []) {
    const f = form.elements[k];
    if (msg.includes(k)) { f.setAttribute('aria-invalid', 'true'); f.setAttribute('aria-describedby', p.id); } else f.removeAttribute('aria-invalid');
  }
}

api('GET', '/whoami').then((w) => { fleetWide = w.fleet; }).catch(() => {});
live('', render, (s) => {
  status.textContent = s === 'live' ? 'Live.' : s === 'polling' ? 'Updated every 2 s (the event stream is unavailable).' : s;
});
