// A deployment's shell in a terminal: xterm.js (vendored, see
// internal/ui/THIRD_PARTY.md) over the websocket GET
// /deployments/{id}/shell, framed as app-lb.md §2.6 says: binary 0x01 +
// keystrokes up, binary 0x02 + output down, JSON text for control
// ({"type":"ready","sandbox_id"} first, {"type":"resize","cols","rows"}
// up, {"type":"exit","code"} or {"type":"error","message"} last). The
// browser sends the page's Origin, which the admin listener's guard
// requires to be its own, and the session cookie, which authenticates
// the upgrade. Loaded by the dashboard on the first Shell.
//
// The pages' CSP refuses inline styles; xterm.js makes <style> elements
// and, for 24-bit colours, style attributes. So, on the dashboard only,
// once this module loads: every <style> made through createElement is
// stamped with the page's style nonce (the CSP admits those), and a style
// attribute set from script is set through the CSSOM instead (the CSP
// governs markup, not the CSSOM; a script could do the same directly).
import { Terminal } from './xterm.js';
import { FitAddon } from './xterm-addon-fit.js';

const nonce = document.querySelector('link[data-style-nonce]')?.nonce || '';
const createElement = Document.prototype.createElement;
const setAttribute = Element.prototype.setAttribute;
Document.prototype.createElement = function (tag, options) {
  const e = createElement.call(this, tag, options);
  if (nonce && String(tag).toLowerCase() === 'style') setAttribute.call(e, 'nonce', nonce);
  return e;
};
Element.prototype.setAttribute = function (name, value) {
  if (this instanceof HTMLElement && String(name).toLowerCase() === 'style') {
    this.style.cssText = String(value);
    return;
  }
  setAttribute.call(this, name, value);
};

const dlg = document.getElementById('shell');
const heading = document.getElementById('shell-h');
const state = document.getElementById('shell-state');
const box = document.getElementById('shell-term');
const closeBtn = document.getElementById('shell-close');
const enc = new TextEncoder();

let session = null; // {term, ws, fit, observer, ended}

function frame(tag, bytes) {
  const b = new Uint8Array(bytes.length + 1);
  b[0] = tag;
  b.set(bytes, 1);
  return b;
}

function end() {
  if (!session) return;
  const s = session;
  session = null;
  s.observer.disconnect();
  if (s.ws.readyState <= WebSocket.OPEN) s.ws.close(1000);
  s.term.dispose();
  box.replaceChildren();
}

closeBtn.addEventListener('click', () => dlg.close());
dlg.addEventListener('close', () => {
  const from = session && session.opener;
  end();
  if (from && from.isConnected) from.focus();
});
// Escape is the shell's while it runs (vi, less, readline all want it);
// Ctrl+] leaves the terminal for the Close button.
dlg.addEventListener('cancel', (ev) => {
  if (session && !session.ended && box.contains(document.activeElement)) ev.preventDefault();
});

export function openShell(id, opener) {
  end();
  heading.textContent = 'Shell in ' + id;
  state.textContent = 'Connecting…';
  dlg.showModal();
  const term = new Terminal({
    cursorBlink: true,
    fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace',
    fontSize: 14,
    scrollback: 5000,
    theme: { background: '#0d1117', foreground: '#e6edf3', cursor: '#79c0ff', selectionBackground: '#264f78' },
  });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  term.attachCustomKeyEventHandler((e) => {
    if (e.type === 'keydown' && e.ctrlKey && e.key === ']') { closeBtn.focus(); return false; }
    return true;
  });
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const ws = new WebSocket(`${proto}//${location.host}/deployments/${encodeURIComponent(id)}/shell?cols=${term.cols}&rows=${term.rows}`);
  ws.binaryType = 'arraybuffer';
  const s = { term, ws, fit, ended: false, opened: false, opener, observer: new ResizeObserver(() => { try { fit.fit(); } catch { /* closing */ } }) };
  session = s;
  s.observer.observe(box);
  const send = (data) => { if (ws.readyState === WebSocket.OPEN) ws.send(data); };
  term.onData((d) => send(frame(0x01, enc.encode(d))));
  term.onBinary((d) => send(frame(0x01, Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff))));
  term.onResize(({ cols, rows }) => send(JSON.stringify({ type: 'resize', cols, rows })));
  ws.onopen = () => { s.opened = true; };
  ws.onmessage = (ev) => {
    if (typeof ev.data !== 'string') {
      const b = new Uint8Array(ev.data);
      if (b[0] === 0x02) term.write(b.subarray(1));
      return;
    }
    let m;
    try { m = JSON.parse(ev.data); } catch { return; }
    if (m.type === 'ready') {
      state.textContent = `Connected to ${m.sandbox_id}. Ctrl+] leaves the terminal for the Close button.`;
      // The size may have changed while connecting.
      send(JSON.stringify({ type: 'resize', cols: term.cols, rows: term.rows }));
    } else if (m.type === 'exit') {
      s.ended = true;
      state.textContent = `The shell exited with status ${m.code}.`;
    } else if (m.type === 'error') {
      s.ended = true;
      state.textContent = 'The shell ended: ' + m.message;
    }
  };
  ws.onclose = (ev) => {
    if (session !== s || s.ended) return;
    s.ended = true;
    state.textContent = s.opened
      ? `The connection closed (${ev.code}${ev.reason ? ': ' + ev.reason : ''}).`
      : 'The shell could not be opened: the server refused it (is there a replica that can run it, and may this sign-in open shells?).';
  };
  term.focus();
}
