// The dashboard (/dashboard): fleet tiles and deployment cards, updated in
// place from the live metrics feed, with Scale (PATCH
// /deployments/{id}/scaling), Edit (PUT /deployments/{id}) and Shell (a
// terminal on GET /deployments/{id}/shell, shell.js), Drain and Evict on a
// replica (DELETE /deployments/{id}/vms/{vm}, ?force=false drains it,
// ?force=true kills it); charts of the last minutes kept from the feed's
// snapshots (charts.js) and the cold-start phases (GET
// /metrics/cold-start); and the operator's sections: certificates,
// secrets' names, tokens, namespaces and jobs with their logs.
import { api, el, live, stateBadge, whoami } from './app.js';
import { bars, legend, lines, num, table } from './charts.js';
import { when } from './format.js';

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
    d.kind === 'vm' && d.vms && d.vms.length ? el('ul', { class: 'vms', 'aria-label': 'Replicas of ' + d.id }, d.vms.map((v) => vmRow(d, v))) : null,
    el('div', { class: 'row actions' },
      d.kind === 'vm' ? el('button', { type: 'button', class: 'ghost', 'data-action': 'scale', 'aria-describedby': name, onclick: () => openScale(d.id) }, 'Scale') : null,
      el('button', { type: 'button', class: 'ghost', 'data-action': 'edit', 'aria-describedby': name, onclick: () => openEdit(d.id) }, 'Edit'),
      d.kind === 'vm' ? el('button', { type: 'button', class: 'ghost', 'data-action': 'shell', 'aria-describedby': name, onclick: (ev) => openShell(d.id, ev.currentTarget) }, 'Shell') : null),
  ].filter(Boolean));
}

// vmRow is one replica on a card: its state and its Drain (finish its
// requests, then stop) and Evict (stop now, after a confirmation).
function vmRow(d, v) {
  const st = v.draining ? 'draining' : v.healthy ? 'healthy' : 'unhealthy';
  return el('li', { 'data-vm': v.sandbox_id },
    el('code', {}, v.sandbox_id),
    el('span', { class: 'muted' }, `${st} · ${v.in_flight} in flight`),
    el('button', { type: 'button', class: 'ghost small', 'data-action': 'drain', 'data-vm': v.sandbox_id, disabled: v.draining, 'aria-label': `Drain ${v.sandbox_id}`, onclick: () => drainVM(d.id, v.sandbox_id) }, 'Drain'),
    el('button', { type: 'button', class: 'ghost small', 'data-action': 'evict', 'data-vm': v.sandbox_id, 'aria-label': `Evict ${v.sandbox_id}`, onclick: () => openEvict(d.id, v.sandbox_id) }, 'Evict'));
}

function renderCards(m) {
  // A card is refilled in place: the button that had the focus has it
  // again afterwards (a keyboard user's place is kept).
  const f = document.activeElement;
  const had = f && f.dataset && f.dataset.action && f.closest('li.card') ? [f.closest('li.card').dataset.deployment, f.dataset.action, f.dataset.vm] : null;
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
    const b = [...cards.children].find((li) => li.dataset.deployment === had[0])?.querySelector(`[data-action="${had[1]}"]${had[2] ? `[data-vm="${CSS.escape(had[2])}"]` : ''}`);
    if (b) b.focus();
  }
}

function render(m) {
  latest = m;
  renderTiles(m);
  record(m);
  renderCharts(m);
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

// Charts. history keeps a sample of each snapshot for the last 5 minutes:
// its time, the request count (for requests/s) and each vm deployment's
// desired and ready replicas.
// It is kept in sessionStorage too, so a reload does not empty the charts
// (under who is signed in: another sign-in in the tab starts afresh).
const WINDOW = 5 * 60 * 1000;
const KEEP = 'berth.dashboard.history:' + (document.querySelector('.who')?.textContent.trim() || '');
const history = (() => {
  try {
    const h = JSON.parse(sessionStorage.getItem(KEEP) || '[]');
    return Array.isArray(h) ? h.filter((x) => x && x.at > Date.now() - WINDOW && x.pools) : [];
  } catch { return []; }
})();
let saved = 0;
function record(m) {
  const now = Date.now();
  const t = fleetWide ? m.global : null;
  const total = t ? t.requests.total : totals(m).requests.total;
  const prev = history[history.length - 1];
  const rps = prev && now > prev.at ? Math.max(0, (total - prev.total) / ((now - prev.at) / 1000)) : null;
  const pools = {};
  for (const d of m.deployments) if (d.kind === 'vm') pools[d.id] = [d.pool.desired_replicas, d.pool.ready];
  history.push({ at: now, total, rps, pools });
  while (history.length && history[0].at < now - WINDOW) history.shift();
  if (now - saved > 5000) {
    saved = now;
    try { sessionStorage.setItem(KEEP, JSON.stringify(history)); } catch { /* full or refused: the charts start afresh */ }
  }
}

const panel = (id) => {
  const f = document.getElementById(id);
  return { plot: f.querySelector('[data-plot]'), table: f.querySelector('[data-table]'), f };
};
const clock = (ms) => new Date(ms).toLocaleTimeString('en-GB');

function renderCharts(m) {
  // Throughput.
  const rp = panel('chart-rps');
  const pts = history.filter((h) => h.rps !== null).map((h) => [h.at, h.rps]);
  const nowRps = pts.length ? pts[pts.length - 1][1] : null;
  const peak = pts.reduce((a, p) => Math.max(a, p[1]), 0);
  rp.plot.replaceChildren(lines(`Throughput over the last 5 minutes: ${num(nowRps)} requests/s now, peak ${num(peak)}`, [{ name: 'rps', cls: 'c1', points: pts }], WINDOW));
  // The table: one row per 30 s, the mean rate.
  const rows = [];
  for (let end = Date.now(); end > Date.now() - WINDOW; end -= 30000) {
    const xs = pts.filter((p) => p[0] <= end && p[0] > end - 30000);
    if (xs.length) rows.push([clock(end), num(xs.reduce((a, p) => a + p[1], 0) / xs.length, 2)]);
  }
  rp.table.replaceChildren(table('Throughput, requests/s', ['Until', 'Requests/s (mean of 30 s)'], rows));

  // Latency: the histogram's buckets (cumulative counts made per bucket).
  const lat = panel('chart-latency');
  const h = latencyHist(m);
  const buckets = [];
  let below = 0;
  for (const b of h.buckets) {
    buckets.push([b.le === null ? '+∞' : '≤' + num(b.le, 1), Math.max(0, b.count - below)]);
    below = b.count;
  }
  lat.f.querySelector('[data-note]').textContent = `requests per bucket (ms) · p50 ${num(h.p50)} · p90 ${num(h.p90)} · p99 ${num(h.p99)}`;
  lat.plot.replaceChildren(bars(`Latency histogram of ${num(h.count, 0)} requests: p50 ${num(h.p50)} ms, p90 ${num(h.p90)} ms, p99 ${num(h.p99)} ms`, buckets, 'c1'));
  lat.table.replaceChildren(table('Latency, requests per bucket', ['Bucket (ms)', 'Requests'], [...buckets.map(([k, v]) => [k, num(v, 0)]), ['p50 / p90 / p99', `${num(h.p50)} / ${num(h.p90)} / ${num(h.p99)} ms`]]));

  // Autoscale: desired and ready replicas per vm deployment.
  const sc = document.getElementById('chart-scale');
  const ids = m.deployments.filter((d) => d.kind === 'vm').map((d) => d.id).slice(0, 8);
  const minis = ids.map((id) => {
    const series = [0, 1].map((i) => history.filter((x) => x.pools[id]).map((x) => [x.at, x.pools[id][i]]));
    const cur = history.length && history[history.length - 1].pools[id];
    return el('div', { class: 'mini', 'data-autoscale': id }, el('p', { class: 'mini-h' }, id),
      lines(`${id}: ${cur ? `${cur[0]} desired, ${cur[1]} ready now` : 'no data'}, over the last 5 minutes`,
        [{ name: 'desired', cls: 'c3', points: series[0], step: true }, { name: 'ready', cls: 'c2', points: series[1], step: true }], WINDOW, '', 80));
  });
  sc.querySelector('[data-plots]').replaceChildren(
    ids.length ? legend([['desired', 'c3'], ['ready', 'c2']]) : el('p', { class: 'empty' }, 'No vm deployments.'),
    el('div', { class: 'minis' }, minis));
  const srows = [];
  for (const id of ids) {
    let lastKey = '';
    for (const x of history) {
      const p = x.pools[id];
      if (!p || p.join() === lastKey) continue;
      lastKey = p.join();
      srows.push([`${clock(x.at)} ${id}`, String(p[0]), String(p[1])]);
    }
  }
  sc.querySelector('[data-table]').replaceChildren(table('Autoscale, changes of desired and ready replicas', ['Time, deployment', 'Desired', 'Ready'], srows));

  // Cold starts: asked again when the boot count changes.
  const boots = fleetWide ? m.global.cold_start_s.count : totals(m).boots;
  if (boots !== coldBoots) { coldBoots = boots; if (whoKnown) loadCold(); }
}

// latencyHist is the fleet's latency histogram, or for a caller below the
// fleet the sum of its deployments' (their buckets share their bounds).
function latencyHist(m) {
  if (fleetWide) return m.global.latency_ms;
  const ds = m.deployments.map((d) => d.metrics.latency_ms).filter((x) => x.buckets.length);
  if (!ds.length) return { count: 0, p50: 0, p90: 0, p99: 0, buckets: [] };
  const out = { count: 0, p50: 0, p90: 0, p99: 0, buckets: ds[0].buckets.map((b) => ({ le: b.le, count: 0 })) };
  for (const x of ds) {
    out.count += x.count; out.p50 = Math.max(out.p50, x.p50); out.p90 = Math.max(out.p90, x.p90); out.p99 = Math.max(out.p99, x.p99);
    x.buckets.forEach((b, i) => { if (out.buckets[i]) out.buckets[i].count += b.count; });
  }
  return out;
}

const PHASES = [['queue', 'c1'], ['pull', 'c4'], ['create', 'c3'], ['boot', 'c2'], ['first_byte', 'c5']];
let coldBoots = -1;
let whoKnown = false; // GET /whoami has answered: whether to ask for the fleet's cold starts
let coldBusy = false;
async function loadCold() {
  const c = panel('chart-cold');
  if (!fleetWide) {
    c.plot.replaceChildren(el('p', { class: 'empty' }, 'Cold-start phases are shown to a fleet-wide session.'));
    return;
  }
  if (coldBusy) return;
  coldBusy = true;
  try {
    const r = await api('GET', '/metrics/cold-start');
    const ds = r.deployments.filter((d) => d.phases.total && d.phases.total.count > 0);
    const mean = (h) => (h && h.count ? h.sum / h.count : 0);
    const rows = ds.map((d) => [d.id, PHASES.map(([p]) => mean(d.phases[p]))]);
    c.plot.replaceChildren(ds.length
      ? bars(`Cold-start phases, mean seconds: ${ds.map((d) => `${d.id} ${num(mean(d.phases.total), 2)} s over ${d.phases.total.count} boots`).join('; ')}`, rows, PHASES.map((p) => p[1]), ' s')
      : el('p', { class: 'empty' }, 'No cold starts yet.'));
    c.f.querySelector('[data-legend]').replaceChildren(legend(PHASES.map(([p, k]) => [p.replace('_', ' '), k])));
    c.table.replaceChildren(table('Cold-start phases, mean seconds', ['Deployment', ...PHASES.map((p) => p[0].replace('_', ' ')), 'total', 'boots'],
      ds.map((d) => [d.id, ...PHASES.map(([p]) => num(mean(d.phases[p]), 3)), num(mean(d.phases.total), 3), String(d.phases.total.count)])));
  } catch (e) {
    c.plot.replaceChildren(el('p', { class: 'empty' }, 'Could not read the cold starts: ' + e.message));
  } finally {
    coldBusy = false;
  }
}

// Drain and Evict.
async function drainVM(id, vm) {
  try {
    await api('DELETE', `/deployments/${encodeURIComponent(id)}/vms/${encodeURIComponent(vm)}?force=false`);
    status.textContent = `Draining ${vm}.`;
  } catch (e) {
    status.textContent = `Could not drain ${vm}: ${e.message}`;
  }
}
const evict = document.getElementById('evict');
const evictErr = document.getElementById('evict-error');
let evicting = null;
function openEvict(id, vm) {
  evicting = [id, vm];
  document.getElementById('evict-what').textContent = `Stop ${vm} of ${id} now? Its requests in flight fail; the autoscaler starts a replacement if the pool needs one.`;
  evictErr.hidden = true;
  evict.showModal();
}
document.getElementById('evict-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const [id, vm] = evicting;
  try {
    const r = await api('DELETE', `/deployments/${encodeURIComponent(id)}/vms/${encodeURIComponent(vm)}?force=true`);
    evict.close();
    status.textContent = `${vm}: ${r && r.outcome ? r.outcome : 'evicted'}.`;
  } catch (e) {
    showError(evictErr, e.message);
  }
});

// The operator's sections, each read once with the session (jobs again
// every 10 s); a section the session may not read says so instead.
const body = (id) => document.querySelector(`#${id} [data-body]`);
const empty = (t) => el('p', { class: 'empty' }, t);
const wrap = (t) => el('div', { class: 'table-wrap' }, t);
const time = (secs) => {
  const w = when(secs * 1000);
  return el('time', { datetime: new Date(secs * 1000).toISOString(), title: w.title }, w.text);
};
function rowsTable(caption, head, rows) {
  return wrap(el('table', { class: 'rows' }, el('caption', { class: 'sr-only' }, caption),
    el('thead', {}, el('tr', {}, head.map((x) => el('th', { scope: 'col' }, x)))),
    el('tbody', {}, rows.map((r) => el('tr', {}, r.map((c, i) => (i === 0 ? el('th', { scope: 'row' }, c) : el('td', { 'data-label': head[i] }, c))))))));
}
async function section(id, path, draw, allowed) {
  const b = body(id);
  if (!allowed) {
    b.replaceChildren(empty('Not available to this session.'));
    return;
  }
  try {
    b.replaceChildren(draw(await api('GET', path)));
  } catch (e) {
    b.replaceChildren(empty(e.status === 403 ? 'Not available to this session.' : e.status === 503 ? 'Not configured on this server.' : 'Could not read: ' + e.message));
  }
}
const list = (x, k) => (Array.isArray(x) ? x : (x && x[k]) || []);

function loadSections(w) {
  const admin = !!(w.may && w.may.use_admin_routes);
  const view = !!(w.may && (w.may.read_view_routes || w.may.use_admin_routes));
  section('sec-certs', '/certs', (cs) => (cs.length ? rowsTable('Certificates', ['Host', 'Expires', 'Issuer', 'Renewal'],
    cs.map((c) => [c.host, el('time', { datetime: c.not_after }, new Date(c.not_after).toLocaleDateString()), c.issuer, c.needs_renewal ? el('span', { class: 'tag err' }, 'due') : el('span', { class: 'tag on' }, 'ok')]))
    : empty('No certificates: berth serves no HTTPS here.')), w.fleet && admin);
  section('sec-secrets', '/secrets', (x) => {
    const ss = list(x, 'secrets');
    return ss.length ? rowsTable('Secrets (names only)', ['Name', 'Namespace', 'Keys', 'Updated'],
      ss.map((c) => [el('span', { 'data-secret': c.id }, c.id), c.namespace, (c.keys || []).join(', ') || '—', c.updated_at ? time(c.updated_at) : '—'])) : empty('No secrets.');
  }, admin);
  section('sec-tokens', '/tokens', (x) => {
    const ts = list(x, 'tokens');
    return ts.length ? rowsTable('Tokens', ['Name', 'Scope', 'Namespace', 'Expires'],
      ts.map((t) => [el('span', { 'data-token': t.name }, t.name), t.admin + (t.fleet ? ' · fleet' : ''), t.namespace || '—', t.expires_at ? time(t.expires_at) : 'never'])) : empty('No tokens.');
  }, admin);
  section('sec-namespaces', '/namespaces', (x) => {
    const ns = list(x, 'namespaces');
    return ns.length ? rowsTable('Namespaces', ['Namespace', 'Deployments', 'Declared'],
      ns.map((n) => [el('span', { 'data-namespace': n.namespace }, n.namespace), String(n.deployments), n.declared ? (n.created_at ? time(n.created_at) : 'yes') : 'no'])) : empty('No namespaces.');
  }, view);
  const jobs = () => section('sec-jobs', '/jobs', (x) => {
    const js = list(x, 'jobs').slice().sort((a, b) => b.started_at - a.started_at).slice(0, 20);
    return js.length ? rowsTable('Jobs', ['Job', 'Deployment', 'Kind', 'Status', 'Started', 'Log'],
      js.map((j) => [el('code', {}, j.id), j.deployment, j.kind, el('span', { class: 'tag ' + (j.status === 'failed' ? 'err' : j.status === 'succeeded' ? 'on' : 'off') }, j.status), time(j.started_at),
        el('button', { type: 'button', class: 'ghost small', 'data-action': 'log', 'aria-label': `Log of job ${j.id}`, onclick: (ev) => openLog(j.id, ev.currentTarget) }, 'Log')])) : empty('No jobs.');
  }, w.fleet && admin);
  jobs();
  if (w.fleet && admin) setInterval(() => { if (!document.querySelector('dialog[open]')) jobs(); }, 10000);
}

// A job's log, followed while it runs (GET /jobs/{id}/log?follow=1, NDJSON).
const joblog = document.getElementById('joblog');
const logText = document.getElementById('joblog-text');
const logState = document.getElementById('joblog-state');
let logAbort = null;
let logOpener = null;
async function openLog(id, opener) {
  logOpener = opener;
  if (logAbort) logAbort.abort();
  logAbort = new AbortController();
  document.getElementById('joblog-h').textContent = 'Job ' + id;
  logText.textContent = '';
  logState.textContent = 'Reading the log…';
  joblog.showModal();
  try {
    const r = await fetch(`/jobs/${encodeURIComponent(id)}/log?follow=1`, { credentials: 'same-origin', signal: logAbort.signal, headers: { Accept: 'application/x-ndjson' } });
    if (!r.ok) throw new Error(`status ${r.status}`);
    const rd = r.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    logState.textContent = 'Following the log.';
    for (;;) {
      const { done, value } = await rd.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (!line.trim()) continue;
        const m = JSON.parse(line);
        if (m.line !== undefined) logText.append(m.line + '\n');
        if (m.status) logState.textContent = 'Finished: ' + m.status + (m.error ? ' — ' + m.error : '');
        logText.scrollTop = logText.scrollHeight;
      }
    }
  } catch (e) {
    if (e.name !== 'AbortError') logState.textContent = 'Could not read the log: ' + e.message;
  }
}
function closeLog() {
  if (logAbort) logAbort.abort();
  logAbort = null;
  if (joblog.open) joblog.close();
  if (logOpener && logOpener.isConnected) logOpener.focus();
}
document.getElementById('joblog-close').addEventListener('click', closeLog);
joblog.addEventListener('close', () => { if (logAbort) closeLog(); });

whoami().then((w) => { fleetWide = w.fleet; whoKnown = true; loadSections(w); loadCold(); });
live('', render, (s) => {
  status.textContent = s === 'live' ? 'Live.' : s === 'polling' ? 'Updated every 2 s (the event stream is unavailable).' : s;
});
