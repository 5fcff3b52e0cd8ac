// Security (/siem): the SIEM's alerts (GET /security), each with its
// runbook (what to check, the suggested rules and their effect), a
// one-click block of the alert's client for a chosen lifetime (POST
// /security/rules), and the guard rules in force with a sparkline of
// their recent hits (hits_recent) and a Delete (DELETE
// /security/rules/{id}). The list is fetched again whenever the live
// metrics feed's security summary changes, and every 15 s.
import { api, live } from './app.js';
import { duration, when, h as el, put } from './format.js';

const status = document.getElementById('live');
const tiles = document.getElementById('tiles');
const alertsUl = document.getElementById('alerts');
const rulesUl = document.getElementById('rules');
const noAlerts = document.getElementById('no-alerts');
const noRules = document.getElementById('no-rules');
const disabled = document.getElementById('disabled');
const rulesNote = document.getElementById('rules-note');
const severity = document.getElementById('severity');
const announce = document.getElementById('announce');
const rulesH = document.getElementById('rules-h');

// The lifetimes a block can be given; an hour is the runbook's default.
const LIFETIMES = [[900, '15 min'], [3600, '1 hour'], [86400, '24 hours'], [0, 'Permanent']];
const SVG = 'http://www.w3.org/2000/svg';

let latest = null;
let feedState = '';
let fetching = null;
let again = false;

const fmt = (n) => (n === null || n === undefined ? '—' : n.toLocaleString('en'));

function tile(id, label, value, note) {
  return el('div', { class: 'tile', 'data-tile': id }, el('dt', {}, label), el('dd', {}, value, note ? el('small', {}, note) : null));
}

// time shows an epoch-millisecond time (alerts); secs one in seconds
// (rules).
function time(ms) {
  const w = when(ms);
  return el('time', { datetime: ms ? new Date(ms).toISOString() : undefined, title: w.title || undefined }, w.text);
}
const secs = (s) => time(s && s * 1000);

function renderTiles(s) {
  const t = s.totals || {};
  const held = ['info', 'low', 'medium', 'high', 'critical'].reduce((n, k) => n + (t[k] || 0), 0);
  const g = s.guard;
  const kids = [
    tile('alerts', 'Alerts', fmt(held), `${fmt(t.medium)} medium · ${fmt(t.low + t.info)} low or info`),
    tile('urgent', 'High or critical', fmt((t.high || 0) + (t.critical || 0)), `${fmt(t.critical)} critical`),
    tile('rules', 'Guard rules', fmt(g.rules), g.enforcing ? 'enforcing' : 'dry run: counted, not refused'),
    tile('blocked', 'Blocked requests', fmt(g.blocked), `${fmt(g.exempted)} exempted`),
  ];
  if (s.stats) {
    kids.push(tile('observed', 'Requests analysed', fmt(s.stats.analyzed), `${fmt(s.stats.tracked_clients)} clients tracked`));
    kids.push(tile('dropped', 'Dropped', fmt(s.stats.dropped), s.stats.dropped ? 'detection is sampling' : 'none: detection is complete'));
  }
  put(tiles, ...kids);
}

// blockingRule is the rule in force that blocks client everywhere, if any.
function blockingRule(client) {
  return latest.rules.find((r) => r.action === 'block' && r.match.client === client && Object.keys(r.match).length === 1);
}

function refusal(p, e) {
  p.textContent = e.status === 403 ? 'Refused: ' + e.message + ' (guard rules need a fleet-wide admin credential)' : e.message;
  p.hidden = false;
}

async function postRule(rule, p, done) {
  p.hidden = true;
  try {
    const v = await api('POST', '/security/rules', rule);
    announce.textContent = `Rule ${v.id} in force: ${v.summary}.`;
    done && done(v);
    await refresh();
  } catch (e) {
    refusal(p, e);
  }
}

function blockEffect(client, secs) {
  return `Refuses every data-plane request from ${client} (403) to every deployment ${secs ? 'for ' + duration(secs) : 'until the rule is deleted'}; everyone else's traffic is unaffected. It does not apply to berth's admin API.`;
}

// alertCard builds an alert's card once: its runbook and forms stay put
// while the live parts (count, last seen, blocked) are updated in place.
function alertCard(a) {
  const li = el('li', { class: 'card alert', 'data-alert': String(a.id), 'data-sev': a.severity, 'aria-labelledby': 'alert-' + a.id });
  const err = el('p', { class: 'error', role: 'alert', hidden: true });
  const r = a.response || { investigate: [], actions: [] };
  const block = r.actions.find((x) => x.kind === 'block-client');
  const client = a.client || (block && block.rule.match.client);
  const parts = [
    el('h3', { id: 'alert-' + a.id }, el('span', { class: 'sev', 'data-sev': a.severity }, a.severity), a.title),
    el('p', { class: 'kv' }, [
      el('code', {}, a.rule), a.technique ? ` · ATT&CK ${a.technique}` : '',
      client ? [' · client ', el('code', { 'data-client': '' }, client)] : '',
      a.deployment ? [' · ', el('span', { class: 'badge' }, a.deployment)] : '',
      a.path ? [' · ', el('code', {}, a.path)] : '',
    ]),
    el('p', { class: 'meta', 'data-live': '' }),
  ];
  if (r.investigate.length || r.caveat) {
    parts.push(el('details', { open: true },
      el('summary', {}, 'Runbook'),
      r.investigate.length ? el('ol', {}, r.investigate.map((x) => el('li', {}, x))) : null,
      r.caveat ? el('p', { class: 'caveat' }, r.caveat) : null));
  }
  if (client) {
    const sel = el('select', { id: 'life-' + a.id, name: 'lifetime' },
      LIFETIMES.map(([secs, label]) => el('option', { value: String(secs), selected: secs === 3600 }, label)));
    const effect = el('p', { class: 'effect', id: 'effect-' + a.id }, blockEffect(client, 3600));
    sel.addEventListener('change', () => { effect.textContent = blockEffect(client, Number(sel.value)); });
    const btn = el('button', { type: 'submit', class: 'small', 'data-action': 'block', 'aria-describedby': 'effect-' + a.id }, 'Block ' + client);
    const form = el('form', { class: 'row', 'data-block': '' },
      el('label', { for: 'life-' + a.id }, 'Block for'), sel, btn);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const secs = Number(sel.value);
      const rule = { action: 'block', match: { client }, note: block ? block.rule.note : `alert ${a.id}: ${a.rule}` };
      if (secs) rule.expires_in_secs = secs;
      btn.disabled = true;
      await postRule(rule, err);
      btn.disabled = false;
    });
    parts.push(form, effect, el('p', { class: 'kv', 'data-blocked': '', hidden: true }));
  }
  const others = r.actions.filter((x) => x.kind !== 'block-client');
  if (others.length) {
    parts.push(el('details', {}, el('summary', {}, 'Other suggested rules'),
      el('ul', { class: 'plain' }, others.map((x, i) => {
        const id = `act-${a.id}-${i}`;
        return el('li', {},
          el('button', { type: 'button', class: 'ghost small', 'data-action': x.kind, 'aria-describedby': id, onclick: (ev) => {
            ev.currentTarget.disabled = true;
            const b = ev.currentTarget;
            postRule(x.rule, err).finally(() => { b.disabled = false; });
          } }, x.label),
          el('p', { class: 'effect', id }, x.effect));
      }))));
  }
  parts.push(err);
  li.append(...parts);
  li._client = client;
  return li;
}

function updateAlert(li, a) {
  const first = time(a.ts);
  const last = time(a.last_ts);
  put(li.querySelector('[data-live]'), `${fmt(a.count)} ${a.count === 1 ? 'time' : 'times'} · first `, first, ' · last ', last);
  const b = li.querySelector('[data-blocked]');
  if (b) {
    const r = blockingRule(li._client);
    b.hidden = !r;
    if (r) put(b, `Blocked by rule ${r.id}`, r.expires_at ? [', expires ', secs(r.expires_at)] : ' (permanent)', '.');
  }
}

// spark draws a rule's hits per bucket, oldest first, as bars.
function spark(series, bucketSecs, id) {
  const n = series.length;
  const peak = Math.max(0, ...series);
  const total = series.reduce((s, v) => s + v, 0);
  const W = 120;
  const H = 24;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('role', 'img');
  const span = duration(n * bucketSecs);
  svg.setAttribute('aria-label', n ? `Hits over the last ${span}: ${total} in all, at most ${peak} in ${duration(bucketSecs)}` : 'No recent hits recorded');
  svg.dataset.total = String(total);
  if (id) svg.dataset.rule = id;
  const base = document.createElementNS(SVG, 'line');
  base.setAttribute('class', 'base');
  base.setAttribute('x1', '0'); base.setAttribute('x2', String(W));
  base.setAttribute('y1', String(H - 0.5)); base.setAttribute('y2', String(H - 0.5));
  svg.append(base);
  series.forEach((v, i) => {
    if (!v) return;
    const h = Math.max(1.5, (v / peak) * (H - 2));
    const r = document.createElementNS(SVG, 'rect');
    r.setAttribute('class', 'bar');
    r.setAttribute('x', String((i * W) / n));
    r.setAttribute('width', String(Math.max(0.8, W / n - 0.4)));
    r.setAttribute('y', String(H - h));
    r.setAttribute('height', String(h));
    svg.append(r);
  });
  return svg;
}

function ruleCard(r) {
  const li = el('li', { class: 'card', 'data-rule': r.id, 'aria-labelledby': 'rule-' + r.id });
  const err = el('p', { class: 'error', role: 'alert', hidden: true });
  const del = el('button', { type: 'button', class: 'ghost small', 'data-action': 'delete', 'aria-describedby': 'rule-' + r.id }, 'Delete');
  del.addEventListener('click', async () => {
    del.disabled = true;
    err.hidden = true;
    try {
      await api('DELETE', '/security/rules/' + encodeURIComponent(r.id));
      announce.textContent = `Rule ${r.id} deleted.`;
      rulesH.focus();
      await refresh();
    } catch (e) {
      refusal(err, e);
      del.disabled = false;
    }
  });
  li.append(
    el('h3', { id: 'rule-' + r.id }, el('span', { class: 'sev', 'data-sev': r.action === 'block' ? 'high' : 'low' }, r.action), r.summary),
    r.note ? el('p', { class: 'kv' }, r.note) : '',
    el('p', { class: 'meta', 'data-live': '' }),
    el('div', { 'data-spark': '' }),
    el('div', { class: 'row actions' }, del),
    err);
  return li;
}

function updateRule(li, r, g) {
  put(li.querySelector('[data-live]'),
    `${fmt(r.hits)} ${r.hits === 1 ? 'hit' : 'hits'}`, r.last_hit ? [' · last ', secs(r.last_hit)] : ' · never hit',
    ' · ', r.expires_at ? ['expires ', secs(r.expires_at)] : 'permanent',
    ' · made ', secs(r.created_at), r.enforcing ? '' : ' · dry run');
  put(li.querySelector('[data-spark]'), spark(r.hits_recent || [], g.hits_bucket_secs || 60, r.id));
}

// keyed puts one card per item into ul in order, reusing the cards it
// already holds.
function keyed(ul, items, key, make, update) {
  const have = new Map([...ul.children].map((li) => [li.dataset.key, li]));
  const order = items.map((x) => {
    let li = have.get(key(x));
    if (li) have.delete(key(x)); else { li = make(x); li.dataset.key = key(x); }
    update(li, x);
    return li;
  });
  for (const li of have.values()) li.remove();
  order.forEach((li, i) => { if (ul.children[i] !== li) ul.insertBefore(li, ul.children[i] || null); });
}

function render(s) {
  latest = s;
  renderTiles(s);
  disabled.hidden = s.enabled;
  keyed(alertsUl, s.alerts, (a) => 'a' + a.id, alertCard, updateAlert);
  noAlerts.hidden = !s.enabled || s.alerts.length > 0;
  keyed(rulesUl, s.rules, (r) => 'r' + r.id, ruleCard, (li, r) => updateRule(li, r, s.guard));
  noRules.hidden = s.rules.length > 0;
  const g = s.guard;
  rulesNote.textContent = `Bars: hits per ${duration(g.hits_bucket_secs)} over the last ${duration(g.hits_window_secs)}, oldest first.` +
    (g.enforcing ? '' : ' Dry run (guard enforcement is off): rules are matched and counted, not refused.');
}

// refresh fetches GET /security again; calls while one runs fold into
// one more.
async function refresh() {
  if (fetching) { again = true; return fetching; }
  fetching = (async () => {
    do {
      again = false;
      const q = severity.value ? '?severity=' + encodeURIComponent(severity.value) : '';
      try {
        render(await api('GET', '/security' + q));
        status.textContent = feedState === 'live' ? 'Live.' : feedState === 'polling' ? 'Updated every 15 s (the event stream is unavailable).' : 'Updated.';
      } catch (e) {
        if (e.status !== 401) status.textContent = 'Could not read the alerts: ' + e.message;
      }
    } while (again);
  })();
  try { await fetching; } finally { fetching = null; }
}

severity.addEventListener('change', refresh);

let summary = '';
live('', (m) => {
  const s = JSON.stringify(m.security || null);
  if (s !== summary) { summary = s; refresh(); }
}, (s) => { const was = feedState; feedState = s; if (was !== s && latest) refresh(); });
setInterval(refresh, 15000);
refresh();
