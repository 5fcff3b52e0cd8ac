// The network page (/network): a picture of the listeners, the routes
// they serve, the deployments behind the routes and each deployment's
// replicas or upstreams with their health, drawn as inline SVG from GET
// /metrics (through the live feed), GET /deployments (the routes), GET
// /ingress (the public addresses) and GET /certs (which hosts the HTTPS
// listener has a certificate for). The tables under it say the same for
// screen readers and narrow screens.
import { api, el, live, liveText, state, stateBadge, whoami } from './app.js';

const SVG = 'http://www.w3.org/2000/svg';
const wrap = document.getElementById('topo-wrap');
const status = document.getElementById('live');
const listenersList = document.getElementById('listeners');
const routesBody = document.getElementById('routes');
const none = document.getElementById('none');

let metrics = null;
let specs = null; // Map id → spec, or null while unread (or not readable)
let ingress = null;
let certs = null; // array of hosts, or null when this credential cannot read them
let drawn = '';

// routeLabel names a route rule as a person would write it.
function routeLabel(r) {
  const path = r.path_prefix || '';
  if (r.host) return r.host + path;
  if (r.host_suffix) return (r.host_suffix.startsWith('.') ? '*' : '*.') + r.host_suffix + path;
  return '(any host)' + (path || '/');
}

function hasCert(host) {
  if (!certs || !host) return false;
  return certs.some((c) => c === host || (c.startsWith('*.') && host.endsWith(c.slice(1)) && !host.slice(0, -c.length + 1).includes('.')));
}

// backends are a deployment's replicas, upstreams or files, each with the
// state its dot shows.
function backends(d) {
  if (d.kind === 'site') return [{ label: 'files', sub: d.site_root || 'site', key: 'ready', health: 'serving files' }];
  const out = [];
  for (const v of d.vms || []) {
    const key = v.draining ? 'starting' : v.healthy ? 'ready' : 'down';
    const health = v.draining ? 'draining' : v.healthy ? 'healthy' : 'unhealthy';
    out.push({ label: d.kind === 'static' ? v.addr : v.sandbox_id, sub: (d.kind === 'static' ? 'upstream · ' : v.addr + ' · ') + health + (v.in_flight ? ` · ${v.in_flight} in flight` : ''), key, health });
  }
  for (const p of d.pending_vms || []) out.push({ label: p.sandbox_id, sub: `booting · ${p.age_secs} s`, key: 'starting', health: 'booting' });
  if (d.kind === 'static' && !out.length) {
    for (const u of d.upstreams || []) out.push({ label: u, sub: 'upstream · health unknown', key: 'starting', health: 'health unknown' });
  }
  if (!out.length) {
    const s = state(d);
    out.push({ label: 'no replicas', sub: s.key === 'idle' ? 'starts on first request' : `wants ${d.pool.desired_replicas}`, key: s.key, health: s.label, empty: true });
  }
  return out;
}

// model is what both the picture and the tables show.
function model() {
  const deps = metrics.deployments.map((d) => {
    const sp = specs && specs.get(d.id);
    const rules = sp ? sp.routes || [] : (d.hosts || []).map((h) => ({ host: h }));
    const routes = rules.map((r) => ({
      label: routeLabel(r) + (r.redirect ? ' ↪' : ''),
      redirect: r.redirect ? r.redirect.to : '',
      tls: hasCert(r.host),
    }));
    return { d, routes, backends: backends(d) };
  });
  const ips = ingress ? [...ingress.ipv4, ...ingress.ipv6] : [];
  const listeners = [
    { id: 'http', label: 'Proxy · HTTP', sub: ips.length ? ips.join(', ') : 'the data plane', key: 'ready' },
    { id: 'https', label: 'Proxy · HTTPS', sub: certs === null ? 'certificates not visible' : certs.length ? `${certs.length} certificate${certs.length === 1 ? '' : 's'}` : 'no certificates', key: certs && certs.length ? 'ready' : 'none' },
    { id: 'admin', label: 'Admin API', sub: location.host + ' · this page', key: 'ready' },
  ];
  return { deps, listeners };
}

function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
  for (const k of kids) if (k !== undefined && k !== null) e.append(k);
  return e;
}

const clip = (s, n) => (s.length > n ? s.slice(0, n - 1) + '…' : s);

const COL = [0, 250, 500, 750];
const NODE_W = 210;
const NODE_H = 42;
const GAP = 10;
const TOP = 34;

function node(x, y, n, cls) {
  return svg('g', { class: 'node ' + (cls || ''), transform: `translate(${x},${y})` },
    svg('title', {}, n.label + (n.sub ? ' — ' + n.sub : '')),
    svg('rect', { width: NODE_W, height: NODE_H, rx: 6 }),
    svg('circle', { cx: 14, cy: NODE_H / 2, r: 5, class: 'dot-' + n.key }),
    svg('text', { x: 26, y: 17, class: 'label' }, clip(n.label, 28)),
    svg('text', { x: 26, y: 33, class: 'sub' }, clip(n.sub || '', 32)));
}

function edge(x1, y1, x2, y2, cls) {
  const mx = (x1 + x2) / 2;
  return svg('path', { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, class: 'edge ' + (cls || '') });
}

function draw(mod) {
  const rowH = NODE_H + GAP;
  const nodes = [];
  const edges = [];
  let row = 0;
  const routeYs = [];
  for (const g of mod.deps) {
    const rows = Math.max(g.routes.length, g.backends.length, 1);
    const y0 = TOP + row * rowH;
    const depY = y0 + ((rows - 1) * rowH) / 2;
    const d = g.d;
    const s = state(d);
    nodes.push(node(COL[2], depY, { label: d.id, sub: d.kind + (d.namespace ? ' · ' + d.namespace : '') + ' · ' + s.label, key: s.key }, 'deployment'));
    g.routes.forEach((r, i) => {
      const y = y0 + i * rowH;
      nodes.push(node(COL[1], y, { label: r.label, sub: r.redirect ? 'redirects to ' + r.redirect : r.tls ? 'HTTP and HTTPS' : 'HTTP', key: 'ready' }, 'route'));
      edges.push(edge(COL[1] + NODE_W, y + NODE_H / 2, COL[2], depY + NODE_H / 2));
      routeYs.push({ y: y + NODE_H / 2, tls: r.tls });
    });
    g.backends.forEach((b, i) => {
      const y = y0 + i * rowH;
      nodes.push(node(COL[3], y, b, b.empty ? 'empty' : 'backend'));
      edges.push(edge(COL[2] + NODE_W, depY + NODE_H / 2, COL[3], y + NODE_H / 2, 'health-' + b.key));
    });
    row += rows;
  }
  row = Math.max(row, mod.listeners.length);
  const height = TOP + row * rowH + 4;
  const lTop = TOP + ((row - mod.listeners.length) * rowH) / 2;
  mod.listeners.forEach((l, i) => {
    const y = lTop + i * rowH;
    nodes.push(node(COL[0], y, l, 'listener'));
    for (const r of routeYs) {
      if (l.id === 'http' || (l.id === 'https' && r.tls)) edges.push(edge(COL[0] + NODE_W, y + NODE_H / 2, COL[1], r.y, l.id === 'https' ? 'tls' : ''));
    }
  });
  const width = COL[3] + NODE_W + 2;
  const heads = ['Listeners', 'Routes', 'Deployments', 'Replicas and upstreams'].map((h, i) => svg('text', { x: COL[i], y: 16, class: 'head' }, h));
  const pic = svg('svg', { width, height, viewBox: `0 0 ${width} ${height}`, class: 'topo', role: 'img', 'aria-labelledby': 'topo-title topo-desc' },
    svg('title', { id: 'topo-title' }, 'Network topology'),
    svg('desc', { id: 'topo-desc' }, `${mod.listeners.length} listeners, ${routeYs.length} routes, ${mod.deps.length} deployments; the tables below list them.`),
    ...heads, svg('g', { class: 'edges' }, ...edges), ...nodes);
  wrap.replaceChildren(pic);
}

function tables(mod) {
  listenersList.replaceChildren(...mod.listeners.map((l) => el('li', { 'data-listener': l.id }, el('strong', {}, l.label), ' — ', l.sub)));
  const rows = [];
  for (const g of mod.deps) {
    const d = g.d;
    const backs = el('ul', { class: 'plain' }, g.backends.map((b) => el('li', {}, el('span', { class: 'dot ' + b.key, 'aria-hidden': 'true' }), ' ', b.label, el('span', { class: 'muted' }, ' — ' + b.sub))));
    const dep = [d.id, d.namespace ? el('span', { class: 'badge' }, d.namespace) : null];
    const routes = g.routes.length ? g.routes : [null];
    for (const r of routes) {
      rows.push(el('tr', { 'data-deployment': d.id },
        el('th', { scope: 'row' }, r ? r.label : el('span', { class: 'muted' }, 'not routed')),
        el('td', { 'data-label': 'Listeners' }, r ? (r.tls ? 'HTTP, HTTPS' : 'HTTP') : '—'),
        el('td', { 'data-label': 'Deployment' }, ...dep),
        el('td', { 'data-label': 'State' }, stateBadge(d)),
        el('td', { 'data-label': 'Backends' }, backs.cloneNode(true))));
    }
  }
  routesBody.replaceChildren(...rows);
  none.hidden = mod.deps.length > 0;
}

function render() {
  if (!metrics) return;
  const mod = model();
  const sig = JSON.stringify(mod);
  if (sig === drawn) return; // unchanged: the tables are not rebuilt under a reader
  drawn = sig;
  draw(mod);
  tables(mod);
}

// refresh reads what the live feed does not carry: the routes, the public
// addresses and the certificates. A credential that cannot read one (a
// view token cannot list specs; certificates are the fleet's) leaves it
// out.
async function refresh() {
  const w = await whoami();
  const skip = Promise.reject(new Error('not asked'));
  skip.catch(() => {});
  const [deps, ing, cs] = await Promise.allSettled([
    w.may.use_admin_routes ? api('GET', '/deployments') : skip,
    api('GET', '/ingress'),
    w.fleet && w.may.use_admin_routes ? api('GET', '/certs') : skip]);
  if (deps.status === 'fulfilled') specs = new Map(deps.value.map((s) => [s.spec.id, s.spec]));
  if (ing.status === 'fulfilled') ingress = ing.value;
  certs = cs.status === 'fulfilled' ? cs.value.map((c) => c.host) : null;
  render();
  setTimeout(refresh, 10000);
}

refresh();
live('', (m) => { metrics = m; render(); }, (s) => { status.textContent = liveText(s); });
