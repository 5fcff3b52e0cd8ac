// Shared by the pages: the admin API client (the browser's session is the
// credential; requests that change state carry the session's CSRF token),
// the live metrics feed, and how a deployment's state is shown.

const csrf = document.querySelector('meta[name="csrf-token"]')?.content || '';

// ApiError is a refusal of the admin API: its status and the message of
// its {"error": "..."} envelope.
export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function signIn() {
  location.assign('/login?next=' + encodeURIComponent(location.pathname));
}

// api calls the admin API and returns the decoded JSON answer.
export async function api(method, path, body) {
  const init = { method, headers: { Accept: 'application/json' }, credentials: 'same-origin' };
  if (method !== 'GET' && method !== 'HEAD') init.headers['X-CSRF-Token'] = csrf;
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  const r = await fetch(path, init);
  const text = await r.text();
  if (r.status === 401) { signIn(); throw new ApiError(401, 'signed out'); }
  if (!r.ok) {
    let msg = text.trim();
    try { msg = JSON.parse(text).error || msg; } catch { /* not JSON */ }
    throw new ApiError(r.status, msg || r.statusText);
  }
  return text ? JSON.parse(text) : null;
}

// live calls onData with a fresh MetricsResponse whenever berth's event
// stream (GET /ui/events) pushes one, and falls back to polling GET
// /metrics every 2 s when the stream cannot be used. onState gets
// "live", "polling" or an error message.
export function live(query, onData, onState) {
  let polling = false;
  let failures = 0;
  const poll = async () => {
    try {
      onData(await api('GET', '/metrics' + query));
      onState('polling');
    } catch (e) {
      if (e.status !== 401) onState('could not read the metrics: ' + e.message);
    }
    setTimeout(poll, 2000);
  };
  const fallBack = () => { if (!polling) { polling = true; poll(); } };
  if (typeof EventSource !== 'function') { fallBack(); return; }
  const es = new EventSource('/ui/events' + query);
  es.onmessage = (ev) => { failures = 0; onState('live'); onData(JSON.parse(ev.data)); };
  es.onerror = () => {
    // A closed stream (an error status) is not retried by the browser;
    // one that keeps failing is given up on too.
    if (es.readyState === EventSource.CLOSED || ++failures >= 3) { es.close(); fallBack(); }
  };
}

// state is how a deployment's state is shown: ready (green), starting or
// idle (amber; idle starts on first request), down (red), files (a site).
export function state(d) {
  if (d.kind === 'site') return { key: 'files', label: 'files' };
  if (d.kind === 'static') {
    return d.upstreams.length ? { key: 'ready', label: 'ready' } : { key: 'down', label: 'down' };
  }
  const p = d.pool;
  if (p.ready > 0) return { key: 'ready', label: 'ready' };
  if (p.pending > 0) return { key: 'starting', label: 'starting' };
  if (p.min_replicas === 0) return { key: 'idle', label: 'idle — starts on first request' };
  return { key: 'down', label: 'down' };
}

// el builds an element: el('p', {class: 'x'}, 'text', child...).
export function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v === true ? '' : v);
  }
  for (const k of kids.flat()) if (k !== undefined && k !== null) e.append(k);
  return e;
}

export function stateBadge(d) {
  const s = state(d);
  return el('span', { class: 'state', 'data-state': s.key }, el('span', { class: 'dot ' + s.key, 'aria-hidden': 'true' }), s.label);
}

// whoami is GET /whoami, read once per page: what the session may do, so
// a page does not ask for what it would be refused (a refused request is
// a console error).
let who = null;
export function whoami() {
  if (!who) who = api('GET', '/whoami').catch(() => ({ fleet: false, confined: true, may: {} }));
  return who;
}

// sseState says how a live page is fed, for its status line.
export function liveText(s) {
  return s === 'live' ? 'Live.' : s === 'polling' ? 'Updated every 2 s (the event stream is unavailable).' : s;
}
