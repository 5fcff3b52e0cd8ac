// The Computers page (/ui/computers; /computers is the Computer API's):
// the Computers this session reaches (GET /computers, which the API
// narrows to a confined token's namespace), their state and backing, the
// facts of the one chosen (GET /computers/{id}/facts as a server-sent
// event stream, falling back to polling its JSON pages), its usage from
// the interval facts, and for a fleet credential the usage ledger's
// unacknowledged intervals (GET /computers/usage/pending).
import { api, el, whoami } from './app.js';

const body = document.getElementById('computers');
const none = document.getElementById('none');
const status = document.getElementById('live');
const scope = document.getElementById('scope');
const filter = document.getElementById('filter');
const factsH = document.getElementById('facts-h');
const factsLive = document.getElementById('facts-live');
const factsList = document.getElementById('facts');
const factsUsage = document.getElementById('facts-usage');
const usageBody = document.getElementById('usage');
const usageNote = document.getElementById('usage-note');
const usageWrap = document.getElementById('usage-wrap');

const KINDS = ['lifecycle', 'process.exited', 'files.written', 'egress', 'interval'];
const MAX_FACTS = 500;

let computers = [];
let pending = null; // the ledger's intervals, or null when not readable
let drawn = '';
let chosen = null; // {id, es, timer, after, runtimes: Map}

const time = (ms) => (ms ? new Date(ms).toLocaleString() : '—');
const backing = (b) => (b ? b.kind + (b.hostId ? ' {' + b.hostId + '}' : '') : '—');
function dur(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return s + ' s';
  if (s < 7200) return Math.round(s / 60) + ' min';
  return (s / 3600).toFixed(1) + ' h';
}

// stateKey maps a Computer's state onto the page's dots.
function stateKey(s) {
  switch (s) {
    case 'running': return 'ready';
    case 'starting': case 'queued': return 'starting';
    case 'sleeping': case 'stopped': return 'idle';
    default: return 'down';
  }
}

function stateBadge(st) {
  const label = st.state + (st.state === 'queued' && st.position ? ` (#${st.position})` : '');
  return el('span', { class: 'state', 'data-state': st.state }, el('span', { class: 'dot ' + stateKey(st.state), 'aria-hidden': 'true' }), label);
}

function pendingOf(id) {
  if (!pending) return null;
  let ms = 0;
  let n = 0;
  for (const f of pending) if (f.computerId === id) { ms += f.observedAt - f.startedAt; n++; }
  return { ms, n };
}

function renderList() {
  const q = filter.value.trim().toLowerCase();
  const shown = computers.filter((c) => !q || c.id.toLowerCase().includes(q) || (c.namespace || '').toLowerCase().includes(q));
  const sig = JSON.stringify([shown, pending && shown.map((c) => pendingOf(c.id)), chosen && chosen.id]);
  if (sig === drawn) return;
  drawn = sig;
  body.replaceChildren(...shown.map((c) => {
    const u = pendingOf(c.id);
    const sel = chosen && chosen.id === c.id;
    return el('tr', { 'data-computer': c.id, 'data-selected': sel ? 'true' : 'false' },
      el('th', { scope: 'row', id: 'c-' + c.id }, c.id, c.image ? el('div', { class: 'muted' }, c.image + (c.size ? ' · ' + c.size : '')) : null),
      el('td', { 'data-label': 'Namespace' }, c.namespace || 'default'),
      el('td', { 'data-label': 'State' }, stateBadge(c.state)),
      el('td', { 'data-label': 'Backing', 'data-backing': '' }, c.active ? backing(c.active) : el('span', { class: 'muted' }, 'none (asleep)'),
        el('div', { class: 'muted' }, 'order: ' + ((c.backings || []).map(backing).join(' → ') || 'fleet default'))),
      el('td', { 'data-label': 'Pending usage' }, u === null ? el('span', { class: 'muted' }, '—') : u.n ? `${dur(u.ms)} · ${u.n} interval${u.n === 1 ? '' : 's'}` : 'none'),
      el('td', { 'data-label': 'Updated' }, time(c.updatedAt)),
      el('td', {}, el('button', { type: 'button', class: sel ? '' : 'ghost', 'data-action': 'facts', 'aria-describedby': 'c-' + c.id, 'aria-controls': 'facts-panel', 'aria-pressed': sel ? 'true' : 'false', onclick: () => follow(c.id) }, 'Facts')));
  }));
  none.hidden = computers.length > 0;
}

function factText(f) {
  switch (f.kind) {
    case 'process.exited': return `exit ${f.exitCode === null || f.exitCode === undefined ? '(killed)' : f.exitCode} after ${f.wallTimeMs} ms · request ${f.requestId}`;
    case 'files.written': return `${f.path} · ${f.bytes} bytes`;
    case 'egress': return `${f.method} ${f.host} → ${f.status}`;
    case 'lifecycle': return `${f.state.state}${f.state.position ? ' #' + f.state.position : ''} at ${time(f.observedAt)}`;
    case 'interval': return `runtime ${f.runtimeId} on ${backing(f.backing)} · ${dur(f.observedAt - f.startedAt)}${f.ended ? ', ended' : ''}`;
  }
  return JSON.stringify(f);
}

// renderUsage sums the chosen Computer's runtimes: its interval facts,
// and the ledger's newer observations of runtimes still open.
function renderUsage() {
  const byRuntime = new Map(chosen.runtimes);
  for (const f of pending || []) {
    const had = byRuntime.get(f.runtimeId);
    if (f.computerId === chosen.id && (!had || f.observedAt > had.observedAt)) byRuntime.set(f.runtimeId, f);
  }
  const rs = [...byRuntime.values()];
  const total = rs.reduce((t, r) => t + (r.observedAt - r.startedAt), 0);
  const open = rs.filter((r) => !r.ended).length;
  factsUsage.hidden = false;
  factsUsage.replaceChildren(
    el('div', { class: 'tile', 'data-tile': 'runtime' }, el('dt', {}, 'Runtime recorded'), el('dd', {}, dur(total), el('small', {}, `${rs.length} runtime${rs.length === 1 ? '' : 's'} · ${open} open`))),
    el('div', { class: 'tile', 'data-tile': 'facts' }, el('dt', {}, 'Facts'), el('dd', {}, String(chosen.count), el('small', {}, 'since the log\'s start'))));
}

function addFact(seq, f) {
  if (!chosen || seq <= chosen.after) return;
  chosen.after = seq;
  chosen.count++;
  const prov = f.provenance ? ` · by ${f.provenance.actor}${f.provenance.via ? ' via ' + f.provenance.via : ''}` : '';
  factsList.prepend(el('li', { value: String(seq), 'data-kind': f.kind, 'data-seq': String(seq) },
    el('span', { class: 'seq' }, '#' + seq), el('span', { class: 'kind' }, f.kind), ' ', factText(f), el('span', { class: 'muted' }, prov)));
  while (factsList.children.length > MAX_FACTS) factsList.lastElementChild.remove();
  if (f.kind === 'interval') chosen.runtimes.set(f.runtimeId, f);
  renderUsage();
}

function stop() {
  if (!chosen) return;
  if (chosen.es) chosen.es.close();
  clearTimeout(chosen.timer);
  chosen = null;
}

// follow streams Computer id's facts from the log's start.
function follow(id) {
  stop();
  const me = { id, es: null, timer: 0, after: 0, count: 0, runtimes: new Map() };
  chosen = me;
  factsH.textContent = 'Facts of ' + id;
  factsList.replaceChildren();
  factsUsage.hidden = true;
  factsLive.textContent = 'Connecting…';
  renderList();
  const path = '/computers/' + encodeURIComponent(id) + '/facts';
  const poll = async () => {
    if (chosen !== me) return;
    try {
      const page = await api('GET', `${path}?after=${me.after}&limit=1000`);
      for (const r of page.facts) addFact(r.seq, r.fact);
      factsLive.textContent = 'Updated every 2 s (the event stream is unavailable).';
      renderUsage();
    } catch (e) {
      if (e.status !== 401) factsLive.textContent = 'Could not read the facts: ' + e.message;
    }
    if (chosen === me) me.timer = setTimeout(poll, 2000);
  };
  if (typeof EventSource !== 'function') { poll(); return; }
  const es = new EventSource(path);
  me.es = es;
  let failures = 0;
  const on = (ev) => {
    failures = 0;
    factsLive.textContent = 'Live.';
    addFact(Number(ev.lastEventId), JSON.parse(ev.data));
  };
  for (const k of KINDS) es.addEventListener(k, on);
  es.onmessage = on;
  es.onopen = () => { if (chosen === me) { factsLive.textContent = 'Live.'; renderUsage(); } };
  es.onerror = () => {
    if (es.readyState === EventSource.CLOSED || ++failures >= 3) { es.close(); me.es = null; poll(); }
  };
}

async function loadList() {
  try {
    computers = (await api('GET', '/computers')).computers;
    status.textContent = `${computers.length} Computer${computers.length === 1 ? '' : 's'} · updated every 5 s.`;
    renderList();
  } catch (e) {
    if (e.status !== 401) status.textContent = 'Could not read the Computers: ' + e.message;
  }
  setTimeout(loadList, 5000);
}

async function loadUsage() {
  try {
    pending = (await api('GET', '/computers/usage/pending')).intervals;
    usageBody.replaceChildren(...(pending.length ? pending.map((f) => el('tr', { 'data-runtime': f.runtimeId },
      el('th', { scope: 'row' }, f.computerId), el('td', { 'data-label': 'Runtime' }, el('code', {}, f.runtimeId)), el('td', { 'data-label': 'Backing' }, backing(f.backing)),
      el('td', { 'data-label': 'Started' }, time(f.startedAt)), el('td', { 'data-label': 'Observed' }, time(f.observedAt)),
      el('td', { 'data-label': 'Duration' }, dur(f.observedAt - f.startedAt)), el('td', { 'data-label': 'Ended' }, f.ended ? 'yes' : 'no')))
      : [el('tr', {}, el('td', { colspan: '7', class: 'muted' }, 'Nothing pending: every interval has been acknowledged, or no Computer has run.'))]));
    renderList();
    if (chosen && chosen.count) renderUsage();
  } catch (e) {
    if (e.status !== 401) usageNote.textContent = 'Could not read the usage ledger: ' + e.message;
  }
  setTimeout(loadUsage, 10000);
}

filter.addEventListener('input', renderList);

(async () => {
  const w = await whoami();
  if (w.confined || !w.fleet) {
    scope.hidden = false;
    scope.textContent = w.namespace ? `This credential is confined to namespace ${w.namespace}: only its Computers are listed.` : 'This credential sees only the Computers of the namespaces it reaches.';
  }
  loadList();
  if (w.fleet) {
    loadUsage();
  } else {
    usageNote.textContent = 'The usage ledger spans every namespace, so it needs a fleet-wide credential. A Computer\'s own usage is in its interval facts.';
    usageWrap.hidden = true;
  }
})();
