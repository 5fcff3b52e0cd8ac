// The directory (/): one card per public URL, with its deployment's
// state, and a note naming the deployments with no URL to link.
import { el, live, stateBadge } from './app.js';

const list = document.getElementById('urls');
const unlinked = document.getElementById('unlinked');
const status = document.getElementById('live');

function render(m) {
  const cards = [];
  const none = [];
  for (const d of m.deployments) {
    if (!d.urls || !d.urls.length) { none.push(d.id); continue; }
    for (const u of d.urls) {
      cards.push(el('li', { class: 'card', 'data-deployment': d.id },
        el('h2', {}, el('a', { href: u }, u.replace(/^https?:\/\//, ''))),
        el('p', { class: 'meta' }, stateBadge(d), ' · ', d.id, d.namespace ? el('span', { class: 'badge' }, d.namespace) : null)));
    }
  }
  list.replaceChildren(...cards);
  unlinked.hidden = none.length === 0;
  unlinked.textContent = none.length ? 'No linkable URL: ' + none.join(', ') + '.' : '';
  if (!cards.length && !none.length) unlinked.hidden = false, unlinked.textContent = 'No deployments yet.';
}

live('?summary=true', render, (s) => {
  status.textContent = s === 'live' ? 'Live.' : s === 'polling' ? 'Updated every 2 s.' : s;
});
