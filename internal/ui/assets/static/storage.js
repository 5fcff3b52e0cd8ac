// Storage (/storage): the disk census (GET /disks, a DiskInventory), with
// Retain / Release (PATCH /disks/{id} {retain}), Archive (POST
// /disks/{id}/archive, its progress read from the census's archives until
// it ends) and Purge (DELETE /disks/{id}, confirmed in a dialog; a
// retained or running disk needs ?force=true, which the dialog asks for
// in so many words).
import { api } from './app.js';
import { bytes, duration, when, h as el, put } from './format.js';

const status = document.getElementById('live');
const tiles = document.getElementById('tiles');
const settings = document.getElementById('settings');
const incomplete = document.getElementById('incomplete');
const disksUl = document.getElementById('disks');
const none = document.getElementById('none');
const filter = document.getElementById('filter');
const archivesS = document.getElementById('archives-s');
const archivesUl = document.getElementById('archives');
const announce = document.getElementById('announce');
const disksH = document.getElementById('disks-h');

let latest = null;
let timer = null;
let fetching = null;
let again = false;

const fmt = (n) => (n === null || n === undefined ? '—' : n.toLocaleString('en'));

// time shows an epoch-second time (every time in the census is one).
function time(secs) {
  const ms = secs && secs * 1000;
  const w = when(ms);
  return el('time', { datetime: ms ? new Date(ms).toISOString() : undefined, title: w.title || undefined }, w.text);
}

function tile(id, label, value, note) {
  return el('div', { class: 'tile', 'data-tile': id }, el('dt', {}, label), el('dd', {}, value, note ? el('small', {}, note) : null));
}

function renderTiles(inv) {
  const t = inv.totals;
  const kids = [
    tile('disks', 'Disks', fmt(t.disks), `${t.running} running · ${t.stopped} stopped · ${t.orphan} orphan`),
    tile('bytes', 'On disk', bytes(t.bytes), bytes(t.apparent_bytes) + ' apparent'),
    tile('retained', 'Retained', fmt(t.retained), `${t.expiring_now} expiring now`),
    tile('reclaimable', 'Reclaimable', bytes(t.reclaimable_bytes), 'by the next sweep'),
  ];
  if (inv.free_bytes !== undefined) {
    const of = inv.filesystem_bytes ? 'of ' + bytes(inv.filesystem_bytes) : '';
    kids.push(tile('free', 'Free', bytes(inv.free_bytes), of));
  }
  put(tiles, ...kids);
  put(settings,
    'Data in ', el('code', {}, inv.data_dir),
    ` · a stopped disk is kept ${duration(inv.ttl_secs)}, an orphan ${duration(inv.orphan_ttl_secs)}; swept every ${duration(inv.sweep_secs)} · `,
    inv.archive_enabled ? ['archives go to ', el('code', {}, inv.archive_target || 'the archive target'), inv.archive_on_expire ? ' (and expiring disks are archived first)' : ''] : 'no archive target');
  incomplete.hidden = inv.complete;
  incomplete.textContent = inv.complete ? '' : 'The census is incomplete: ' + (inv.incomplete_reason || 'a driver could not be read') + '.';
}

// running is the archive of disk id under way, if any.
function running(id) {
  return latest.archives.find((a) => a.sandbox_id === id && a.status === 'running');
}

// needsForce says why DELETE /disks/{id} would refuse d without force.
function needsForce(d) {
  if (d.retain) return 'It is retained' + (d.note ? ` (“${d.note}”)` : '') + ': purge it anyway';
  if (d.state === 'running') return 'Its sandbox is running: purge it anyway';
  if (d.state === 'unknown') return 'Its driver cannot say whether the sandbox runs: purge it anyway';
  return '';
}

function progress(a) {
  const pct = a.expected_bytes ? Math.min(100, Math.round((100 * a.bytes) / a.expected_bytes)) : null;
  const label = `Archiving ${a.sandbox_id}: ` + (pct === null ? bytes(a.bytes) : `${pct} % (${bytes(a.bytes)} of ${bytes(a.expected_bytes)})`);
  return el('div', { 'data-progress': a.id },
    el('progress', { max: String(a.expected_bytes || 1), value: String(a.bytes), 'aria-label': label }),
    el('p', { class: 'kv' }, label));
}

function diskCard(d) {
  const id = d.sandbox_id;
  const hid = 'disk-' + id;
  const li = el('li', { class: 'card', 'data-disk': id, 'aria-labelledby': hid });
  const err = el('p', { class: 'error', role: 'alert', hidden: true });
  const show = (e) => { err.textContent = e.message; err.hidden = false; };
  const retain = el('button', { type: 'button', class: 'ghost small', 'data-action': 'retain', 'aria-describedby': hid });
  retain.addEventListener('click', async () => {
    err.hidden = true;
    const d = li._disk;
    retain.disabled = true;
    try {
      await api('PATCH', '/disks/' + encodeURIComponent(id), { retain: !d.retain });
      announce.textContent = `${id} ${d.retain ? 'released: the sweep may remove it' : 'retained: the sweep keeps it'}.`;
      await refresh();
    } catch (e) { show(e); }
    retain.disabled = false;
  });
  const archive = el('button', { type: 'button', class: 'ghost small', 'data-action': 'archive', 'aria-describedby': hid }, 'Archive');
  archive.addEventListener('click', async () => {
    err.hidden = true;
    archive.disabled = true;
    try {
      const v = await api('POST', '/disks/' + encodeURIComponent(id) + '/archive');
      announce.textContent = `Archiving ${id} to ${v.uri}.`;
      await refresh();
    } catch (e) { show(e); archive.disabled = false; }
  });
  const purge = el('button', { type: 'button', class: 'ghost small', 'data-action': 'purge', 'aria-describedby': hid, onclick: () => openPurge(li._disk, purge) }, 'Purge');
  li.append(
    el('h3', { id: hid }, el('code', {}, id), el('span', { 'data-badges': '' })),
    el('p', { class: 'kv', 'data-who': '' }),
    el('p', { class: 'meta', 'data-size': '' }),
    el('p', { class: 'kv', 'data-fate': '' }),
    el('div', { 'data-arch': '' }),
    el('details', {}, el('summary', {}, 'Parts'), el('div', { 'data-parts': '' })),
    el('div', { class: 'row actions' }, retain, archive, purge),
    err);
  li._buttons = { retain, archive };
  return li;
}

function updateDisk(li, d, inv) {
  li._disk = d;
  const b = li.querySelector('[data-badges]');
  put(b,
    el('span', { class: 'badge', 'data-state': d.state }, d.state),
    d.retain ? el('span', { class: 'badge', 'data-retained': '' }, 'retained') : '',
    d.claimed ? '' : el('span', { class: 'badge' }, 'unclaimed'));
  put(li.querySelector('[data-who]'),
    d.name ? d.name : '', d.deployment ? [d.name ? ' · ' : '', 'deployment ', el('span', { class: 'badge' }, d.deployment)] : '',
    d.held_by ? ` · ${d.held_by}` : '', d.note ? [' · note: ', d.note] : '');
  put(li.querySelector('[data-size]'), `${bytes(d.bytes)} on disk (${bytes(d.apparent_bytes)} apparent) · changed `, time(d.modified_at));
  put(li.querySelector('[data-fate]'),
    d.expires_at ? ['The sweep removes it ', time(d.expires_at), '.'] : d.retain ? 'Kept until released.' : 'Not expiring.',
    d.archived ? [' Archived ', time(d.archived.at), ` (${bytes(d.archived.bytes)}) to `, el('code', {}, d.archived.uri), '.'] : '');
  const run = running(d.sandbox_id);
  put(li.querySelector('[data-arch]'), run ? progress(run) : '');
  li._buttons.retain.textContent = d.retain ? 'Release' : 'Retain';
  li._buttons.retain.setAttribute('aria-pressed', d.retain ? 'true' : 'false');
  li._buttons.archive.disabled = !inv.archive_enabled || !!run || d.state === 'running';
  li._buttons.archive.textContent = run ? 'Archiving…' : 'Archive';
  put(li.querySelector('[data-parts]'), d.parts.length
    ? el('table', { class: 'parts' },
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Kind'), el('th', { scope: 'col' }, 'Path'), el('th', { scope: 'col', class: 'num' }, 'Size'))),
      el('tbody', {}, d.parts.map((p) => el('tr', {}, el('td', {}, p.kind), el('td', {}, el('code', {}, p.path)), el('td', { class: 'num' }, bytes(p.bytes))))))
    : el('p', { class: 'kv' }, 'No parts.'));
}

function archiveItem(a) {
  return el('li', { class: 'card', 'data-archive': a.id },
    el('h3', {}, el('code', {}, a.sandbox_id), el('span', { class: 'badge', 'data-status': a.status }, a.status)),
    a.status === 'running' ? progress(a) : el('p', { class: 'meta' }, `${bytes(a.bytes)} · `, a.finished_at ? ['finished ', time(a.finished_at)] : ['started ', time(a.started_at)], a.purged ? ' · disk purged' : ''),
    el('p', { class: 'kv' }, el('code', {}, a.uri)),
    a.error ? el('p', { class: 'error' }, a.error) : '');
}

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

function renderDisks() {
  const inv = latest;
  const q = filter.value.trim().toLowerCase();
  const shown = inv.disks.filter((d) => !q || [d.sandbox_id, d.name, d.deployment].some((s) => s && s.toLowerCase().includes(q)));
  keyed(disksUl, shown, (d) => d.sandbox_id, diskCard, (li, d) => updateDisk(li, d, inv));
  none.hidden = inv.disks.length > 0;
  const recent = [...inv.archives].sort((a, b) => b.started_at - a.started_at).slice(0, 12);
  archivesS.hidden = recent.length === 0;
  put(archivesUl, ...recent.map(archiveItem));
}

// refresh reads the census again: every second while an archive runs,
// every 10 s otherwise.
async function refresh() {
  if (fetching) { again = true; return fetching; }
  fetching = (async () => {
    do {
      again = false;
      try {
        latest = await api('GET', '/disks');
        renderTiles(latest);
        renderDisks();
        status.textContent = latest.archives.some((a) => a.status === 'running') ? 'An archive is running: updated every second.' : 'Updated every 10 s.';
      } catch (e) {
        if (e.status !== 401) status.textContent = 'Could not read the disks: ' + e.message;
      }
    } while (again);
  })();
  try { await fetching; } finally { fetching = null; }
  clearTimeout(timer);
  const busy = latest && latest.archives.some((a) => a.status === 'running');
  timer = setTimeout(refresh, busy ? 1000 : 10000);
}

filter.addEventListener('input', () => latest && renderDisks());

// Purge.
const dlg = document.getElementById('purge');
const form = document.getElementById('purge-form');
const what = document.getElementById('purge-what');
const forceRow = document.getElementById('purge-force-row');
const force = document.getElementById('purge-force');
const forceLabel = document.getElementById('purge-force-label');
const purgeErr = document.getElementById('purge-error');
let purging = null;
let opener = null;
function askForce(why) {
  forceLabel.textContent = why;
  forceRow.hidden = false;
  force.required = true;
}
function openPurge(d, from) {
  purging = d;
  opener = from;
  document.getElementById('purge-h').textContent = 'Purge ' + d.sandbox_id + '?';
  what.textContent = `This removes ${d.sandbox_id}'s files (${bytes(d.bytes)}) from ${latest.data_dir} for good` +
    (d.archived ? '; its archive at ' + d.archived.uri + ' is kept.' : ', and it has no archive.');
  force.checked = false;
  force.required = false;
  forceRow.hidden = true;
  const why = needsForce(d);
  if (why) askForce(why);
  purgeErr.hidden = true;
  dlg.showModal();
  document.getElementById(why ? 'purge-force' : 'purge-confirm').focus();
}
form.addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const id = purging.sandbox_id;
  purgeErr.hidden = true;
  try {
    const out = await api('DELETE', '/disks/' + encodeURIComponent(id) + (force.checked ? '?force=true' : ''));
    if (out.failed && out.failed.length) throw new Error(out.failed.map((f) => `${f.sandbox_id}: ${f.error}`).join('\n'));
    opener = null; // its card is gone: focus goes to the list's heading
    dlg.close();
    announce.textContent = `${id} purged: ${bytes(out.freed_bytes)} freed.`;
    disksH.focus();
    await refresh();
  } catch (e) {
    if (e.status === 409 && !force.checked) askForce(e.message + ': purge it anyway');
    purgeErr.textContent = e.message;
    purgeErr.hidden = false;
  }
});
for (const b of document.querySelectorAll('dialog [data-close]')) b.addEventListener('click', () => b.closest('dialog').close());
dlg.addEventListener('close', () => { if (opener && opener.isConnected) opener.focus(); opener = null; });

refresh();
