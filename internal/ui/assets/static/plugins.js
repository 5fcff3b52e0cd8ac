// The plugins page (/plugins): a card per compiled-in plugin (GET
// /api/plugins) with its state, Enable/Disable (POST
// /api/plugins/{id}/enable|disable), its status, a JSON config editor
// (PUT /api/plugins/{id}, validated by the server: its error is shown on
// the field), and for a per-namespace plugin its installs (GET
// /api/plugins/{id}/installs) with Install and Uninstall (PUT|DELETE
// /namespaces/{ns}/plugins/{id}). The fleet's plugins are the operator's:
// a credential below the fleet is told so.
import { api, el, whoami } from './app.js';

const list = document.getElementById('plugins');
const status = document.getElementById('live');
const installs = new Map(); // plugin id → PluginInstalls

const pretty = (raw) => JSON.stringify(raw === undefined ? null : raw, null, 2);
const when = (ms) => (ms ? new Date(ms).toLocaleString() : '—');

function tag(p) {
  if (p.last_error) return el('span', { class: 'tag err', 'data-tag': 'error' }, p.enabled ? 'enabled · error' : 'error');
  return p.enabled ? el('span', { class: 'tag on', 'data-tag': 'enabled' }, 'enabled') : el('span', { class: 'tag off', 'data-tag': 'disabled' }, 'disabled');
}

// fieldError shows the API's refusal under the field it names, and marks
// the field (aria-invalid, described by the message).
function fieldError(input, p, msg) {
  p.textContent = msg;
  p.hidden = !msg;
  if (msg) {
    input.setAttribute('aria-invalid', 'true');
  } else {
    input.removeAttribute('aria-invalid');
  }
}

function card(p) {
  const li = el('li', { class: 'card', 'data-plugin': p.id });
  fill(li, p);
  return li;
}

function fill(li, p) {
  const id = p.id;
  const h = 'plugin-' + id;
  const busy = (on) => { for (const b of li.querySelectorAll('button')) b.disabled = on; };

  const toggle = el('button', { type: 'button', 'data-action': p.enabled ? 'disable' : 'enable', 'aria-describedby': h, onclick: async () => {
    busy(true);
    try {
      await api('POST', `/api/plugins/${encodeURIComponent(id)}/${p.enabled ? 'disable' : 'enable'}`);
      // Enabling a per-namespace plugin installs it: its installs are
      // read again with it.
      await load(true);
      list.querySelector(`li[data-plugin="${CSS.escape(id)}"] [data-action="enable"], li[data-plugin="${CSS.escape(id)}"] [data-action="disable"]`)?.focus();
      status.textContent = `${p.name} ${p.enabled ? 'disabled' : 'enabled'}.`;
    } catch (e) {
      status.textContent = e.message;
      busy(false);
    }
  } }, p.enabled ? 'Disable' : 'Enable');
  if (!p.enabled) toggle.classList.add('ghost');

  // The config editor.
  const cfgID = `cfg-${id}`;
  const errID = `cfg-${id}-error`;
  const cfg = el('textarea', { id: cfgID, rows: 5, spellcheck: 'false', 'aria-describedby': errID });
  cfg.value = pretty(p.config ?? {});
  const cfgErr = el('p', { class: 'field-error', id: errID, role: 'alert', hidden: true });
  const form = el('form', { class: 'stack', 'data-form': 'config' },
    el('label', { for: cfgID }, 'Config (JSON)'),
    cfg, cfgErr,
    el('div', { class: 'row' },
      el('button', { type: 'submit', 'data-action': 'save' }, 'Save'),
      el('button', { type: 'button', class: 'ghost', 'data-action': 'revert', onclick: () => { cfg.value = pretty(p.config ?? {}); fieldError(cfg, cfgErr, ''); } }, 'Revert')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    let config;
    try { config = JSON.parse(cfg.value); } catch (e) { fieldError(cfg, cfgErr, 'Not valid JSON: ' + e.message); cfg.focus(); return; }
    busy(true);
    try {
      replace(await api('PUT', '/api/plugins/' + encodeURIComponent(id), { enabled: p.enabled, config }));
      status.textContent = `${p.name}: config saved.`;
    } catch (e) {
      busy(false);
      fieldError(cfg, cfgErr, e.message);
      cfg.focus();
    }
  });

  const kids = [
    el('h2', { id: h }, p.name, el('span', { class: 'badge' }, p.id), tag(p)),
    el('p', {}, p.description),
    p.last_error ? el('p', { class: 'error', 'data-last-error': '' }, 'Last apply failed: ' + p.last_error) : null,
    el('p', { class: 'meta' }, 'Updated ' + (p.updated_at ? new Date(p.updated_at * 1000).toLocaleString() : 'never')),
    el('div', { class: 'row actions' }, toggle),
    el('details', {}, el('summary', {}, 'Status'), el('pre', { class: 'json', 'data-status': '' }, pretty(p.status))),
    el('details', {}, el('summary', {}, 'Config schema'), el('pre', { class: 'json' }, pretty(p.config_schema))),
    form,
  ];
  kids.push(p.per_namespace ? installPanel(p) : el('p', { class: 'meta', 'data-installs': 'all' }, 'Serves every namespace while enabled: nothing to install.'));
  li.replaceChildren(...kids.filter(Boolean));
}

// installPanel lists the namespaces that installed a per-namespace
// plugin, each with Uninstall, and a form to install it in another.
function installPanel(p) {
  const id = p.id;
  const box = el('section', { class: 'stack', 'aria-label': `Installs of ${p.name}`, 'data-installs': id });
  const nsID = `ns-${id}`;
  const errID = `ns-${id}-error`;
  const ns = el('input', { id: nsID, name: 'namespace', autocomplete: 'off', placeholder: 'team', required: true, 'aria-describedby': errID });
  const err = el('p', { class: 'field-error', id: errID, role: 'alert', hidden: true });
  const rows = el('ul', { class: 'plain', 'data-install-list': '' });
  const draw = () => {
    const inst = installs.get(id);
    const names = (inst ? inst.namespaces : p.installed_in) || [];
    rows.replaceChildren(...(names.length ? names.map((n) => {
      const rec = inst && inst.installs && inst.installs[n];
      return el('li', { 'data-namespace': n }, el('strong', {}, n),
        el('span', { class: 'muted' }, rec ? ` · installed ${when(rec.installed_at * 1000)}${rec.installed_by ? ' by ' + rec.installed_by : ''}` : ''),
        ' ', el('button', { type: 'button', class: 'ghost', 'data-action': 'uninstall', 'aria-label': `Uninstall ${p.name} from ${n}`, onclick: () => change('DELETE', n) }, 'Uninstall'));
    }) : [el('li', { class: 'muted' }, 'Not installed in any namespace.')]));
  };
  const change = async (method, n) => {
    try {
      await api(method, `/namespaces/${encodeURIComponent(n)}/plugins/${encodeURIComponent(id)}`);
      fieldError(ns, err, '');
      if (method === 'PUT') ns.value = '';
      status.textContent = `${p.name} ${method === 'PUT' ? 'installed in' : 'uninstalled from'} ${n}.`;
      await load(true);
      list.querySelector(`li[data-plugin="${CSS.escape(id)}"] input[name="namespace"]`)?.focus();
    } catch (e) {
      fieldError(ns, err, e.message);
      if (method === 'PUT') ns.focus();
    }
  };
  const form = el('form', { class: 'row', 'data-form': 'install' },
    el('label', { for: nsID }, 'Install in namespace'), ns,
    el('button', { type: 'submit', 'data-action': 'install' }, 'Install'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const n = ns.value.trim();
    if (!n) { fieldError(ns, err, 'Name a namespace.'); ns.focus(); return; }
    change('PUT', n);
  });
  box.append(el('h3', {}, 'Installs'), rows, form, err);
  draw();
  return box;
}

// replace redraws one card with the plugin the API answered.
function replace(p) {
  const li = list.querySelector(`li[data-plugin="${CSS.escape(p.id)}"]`);
  if (li) fill(li, p);
}

// load reads the plugins and draws them; unless forced, not while the
// user is editing a card.
async function load(force) {
  const ps = await api('GET', '/api/plugins');
  await Promise.all(ps.filter((p) => p.per_namespace).map(async (p) => {
    try { installs.set(p.id, await api('GET', `/api/plugins/${encodeURIComponent(p.id)}/installs`)); } catch { installs.delete(p.id); }
  }));
  const open = document.activeElement && list.contains(document.activeElement);
  if (open && !force) return;
  list.replaceChildren(...ps.map(card));
  status.textContent = ps.length ? `${ps.length} plugin${ps.length === 1 ? '' : 's'}.` : 'No plugins are compiled in.';
}

(async () => {
  const w = await whoami();
  if (!w.fleet) {
    status.textContent = 'The plugins are the operator\'s: this credential is not fleet-wide, so it cannot read them.';
    return;
  }
  try { await load(); } catch (e) { status.textContent = 'Could not read the plugins: ' + e.message; }
})();
