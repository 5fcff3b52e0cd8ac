// The colour theme: the system's (prefers-color-scheme) unless the toggle
// chose light or dark, kept in localStorage. Loaded in <head>, before the
// page paints, so a chosen theme never flashes the other one.
(function () {
  var key = 'berth-theme';
  var root = document.documentElement;
  function apply(t) {
    if (t === 'light' || t === 'dark') root.dataset.theme = t; else delete root.dataset.theme;
    var b = document.getElementById('theme');
    if (b) {
      var name = t === 'light' || t === 'dark' ? t : 'system';
      b.textContent = 'Theme: ' + name;
      b.setAttribute('aria-label', 'Colour theme: ' + name + ' (change)');
    }
  }
  var saved = null;
  try { saved = localStorage.getItem(key); } catch (e) { /* storage off */ }
  apply(saved);
  document.addEventListener('DOMContentLoaded', function () {
    apply(saved);
    var b = document.getElementById('theme');
    if (!b) return;
    b.addEventListener('click', function () {
      var order = [null, 'light', 'dark'];
      saved = order[(order.indexOf(saved) + 1) % order.length];
      try { if (saved) localStorage.setItem(key, saved); else localStorage.removeItem(key); } catch (e) { /* storage off */ }
      apply(saved);
    });
  });
})();
