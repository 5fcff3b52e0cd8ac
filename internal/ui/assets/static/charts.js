// The dashboard's charts: inline SVG drawn here (no chart library), each
// an image with an accessible name, beside a table of its numbers (the
// caller puts it in a <details>). Colours come from app.css through
// classes (the pages' CSP refuses style attributes).
import { el } from './app.js';

const SVG = 'http://www.w3.org/2000/svg';

function s(tag, attrs, ...kids) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  for (const k of kids.flat()) if (k) e.append(k);
  return e;
}

const W = 320;
const HEIGHT = 140;
const PAD = { l: 34, r: 6, t: 8, b: 20 };

const num = (n, d = 1) => (n === null || n === undefined || Number.isNaN(n) ? '—' : n.toLocaleString('en', { maximumFractionDigits: d }));

// nice rounds a chart's top up to 1, 2 or 5 × 10ⁿ.
function nice(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function frame(label, top, unit, H) {
  const svg = s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': label });
  const y0 = H - PAD.b;
  svg.append(
    s('line', { class: 'grid', x1: PAD.l, x2: W - PAD.r, y1: PAD.t, y2: PAD.t }),
    s('line', { class: 'grid', x1: PAD.l, x2: W - PAD.r, y1: (PAD.t + y0) / 2, y2: (PAD.t + y0) / 2 }),
    s('line', { class: 'axis', x1: PAD.l, x2: W - PAD.r, y1: y0, y2: y0 }),
    s('text', { class: 'tick', x: PAD.l - 4, y: PAD.t + 3, 'text-anchor': 'end' }, document.createTextNode(num(top) + (unit || ''))),
    s('text', { class: 'tick', x: PAD.l - 4, y: y0 + 3, 'text-anchor': 'end' }, document.createTextNode('0')),
  );
  return svg;
}

// lines draws series of [time ms, value] over the window ending now:
// series = [{name, cls, points, step}]. An empty series draws nothing.
// H is the drawing's height (its width is W).
export function lines(label, series, windowMs, unit, H = HEIGHT) {
  const now = Date.now();
  const all = series.flatMap((x) => x.points.map((p) => p[1])).filter((v) => v !== null);
  const top = nice(Math.max(0, ...all));
  const svg = frame(label, top, unit, H);
  const y0 = H - PAD.b;
  const x = (t) => PAD.l + ((t - (now - windowMs)) / windowMs) * (W - PAD.l - PAD.r);
  const y = (v) => y0 - (v / top) * (y0 - PAD.t);
  for (const ser of series) {
    const pts = ser.points.filter((p) => p[1] !== null && p[0] >= now - windowMs);
    if (!pts.length) continue;
    let d = '';
    pts.forEach(([t, v], i) => {
      if (i === 0) d += `M${x(t).toFixed(1)},${y(v).toFixed(1)}`;
      else if (ser.step) d += `H${x(t).toFixed(1)}V${y(v).toFixed(1)}`;
      else d += `L${x(t).toFixed(1)},${y(v).toFixed(1)}`;
    });
    if (pts.length === 1) d += `h2`;
    svg.append(s('path', { class: 'line ' + ser.cls, d, 'data-series': ser.name }));
  }
  svg.append(
    s('text', { class: 'tick', x: PAD.l, y: H - 5 }, document.createTextNode(`−${Math.round(windowMs / 60000)} min`)),
    s('text', { class: 'tick', x: W - PAD.r, y: H - 5, 'text-anchor': 'end' }, document.createTextNode('now')),
  );
  return svg;
}

// bars draws one bar per [label, value]; stacked bars take [label,
// [values…]] and classes per part (cls[i]).
export function bars(label, rows, cls, unit, H = HEIGHT) {
  const totals = rows.map(([, v]) => (Array.isArray(v) ? v.reduce((a, b) => a + b, 0) : v));
  const top = nice(Math.max(0, ...totals));
  const svg = frame(label, top, unit, H);
  const y0 = H - PAD.b;
  const span = (W - PAD.l - PAD.r) / Math.max(rows.length, 1);
  const bw = Math.max(2, Math.min(40, span * 0.7));
  const every = Math.ceil(rows.length / 8); // labels that fit
  rows.forEach(([name, v], i) => {
    const cx = PAD.l + span * (i + 0.5);
    let base = y0;
    (Array.isArray(v) ? v : [v]).forEach((part, j) => {
      const h = (part / top) * (y0 - PAD.t);
      if (h <= 0) return;
      base -= h;
      svg.append(s('rect', { class: 'bar ' + (Array.isArray(cls) ? cls[j] : cls), x: (cx - bw / 2).toFixed(1), y: base.toFixed(1), width: bw.toFixed(1), height: h.toFixed(1), 'data-bar': name }));
    });
    if (i % every === 0) svg.append(s('text', { class: 'tick', x: cx.toFixed(1), y: H - 5, 'text-anchor': 'middle' }, document.createTextNode(name)));
  });
  return svg;
}

// table is a chart's numbers: head is the column names, rows the cells.
// It scrolls sideways in its own region when it is wider than the panel.
export function table(caption, head, rows) {
  return el('div', { class: 'table-wrap', role: 'region', 'aria-label': caption, tabindex: '0' }, el('table', { class: 'nums' },
    el('caption', { class: 'sr-only' }, caption),
    el('thead', {}, el('tr', {}, head.map((x) => el('th', { scope: 'col' }, x)))),
    el('tbody', {}, rows.length ? rows.map((r) => el('tr', {}, r.map((c, i) => (i === 0 ? el('th', { scope: 'row' }, c) : el('td', {}, c))))) : el('tr', {}, el('td', { colspan: String(head.length) }, 'No data yet.')))));
}

// legend names a chart's series by their classes.
export function legend(items) {
  return el('ul', { class: 'legend' }, items.map(([name, cls]) => el('li', {}, el('span', { class: 'key ' + cls, 'aria-hidden': 'true' }), name)));
}

export { num };
