// How the security and storage pages show times, durations and sizes.
import { el } from './app.js';

// when is an epoch-millisecond time as the page shows it: relative
// ("3 min ago", "in 2 h"), with the absolute time for a title.
export function when(ms) {
  if (!ms) return { text: '—', title: '' };
  const d = new Date(ms);
  const s = Math.round((ms - Date.now()) / 1000);
  const a = Math.abs(s);
  let text;
  if (a < 45) text = 'just now';
  else {
    const [n, unit] = a < 3600 ? [Math.round(a / 60), 'min'] : a < 86400 * 2 ? [Math.round(a / 3600), 'h'] : [Math.round(a / 86400), 'd'];
    text = s < 0 ? `${n} ${unit} ago` : `in ${n} ${unit}`;
  }
  return { text, title: d.toLocaleString() };
}

// duration is a number of seconds as "15 min", "1 h", "7 d".
export function duration(secs) {
  if (secs === null || secs === undefined) return 'permanent';
  if (secs < 3600) return Math.round(secs / 60) + ' min';
  if (secs < 86400 || secs % 86400) return +(secs / 3600).toFixed(1) + ' h';
  return secs / 86400 + ' d';
}

// bytes is a size in binary units.
export function bytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? String(v) : v.toLocaleString('en', { maximumFractionDigits: v < 10 ? 1 : 0 })) + ' ' + units[i];
}

// h is app.js's el with nested arrays of children flattened (a part of a
// line that is there or not: cond ? ['text ', el(...)] : '').
export function h(tag, attrs, ...kids) {
  return el(tag, attrs, kids.flat(Infinity));
}

// put replaces node's children, nested arrays flattened as h does.
export function put(node, ...kids) {
  node.replaceChildren(...kids.flat(Infinity));
}
