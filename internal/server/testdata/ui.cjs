// ui.cjs drives headless Chromium through berth's web UI (TestBrowserUI):
// sign in (a wrong password first), watch a deployment that scales from
// zero go from idle to ready on the dashboard after a request to it, scale
// it (an invalid scale first, its error shown on the field), an invalid
// edit, the theme toggle, sign out; then a namespace-confined token's
// view, on a browser whose event stream fails (the pages poll); then the
// operator again: on /siem, block an alert's client for 15 minutes, see
// the rule, its hit, and delete it; on /storage, archive a disk and purge
// a retained one; on the dashboard, a shell in a terminal. Every page is
// checked with axe-core and screenshotted in light and dark, at 360 px and
// wide. It prints one JSON object of what it saw; the Go test asserts.
//
// usage: node ui.cjs <admin origin> <proxy host:port> <team token> <screenshot dir> <alert id> <retained disk> <disk to archive>
// NODE_PATH must name a node_modules holding playwright-core and axe-core.
const { start } = require('./browser.cjs');
const http = require('node:http');
const path = require('node:path');

async function main() {
  const [admin, proxy, teamToken, shots, alertID, retainedDisk, archiveDisk] = process.argv.slice(2);
  const run = await start(shots);
  const { browser, out, watch, step, axe, shoot } = run;
  // hit asks web.test for /hello, from the loopback address from
  // (default 127.0.0.1).
  const hit = (from) => new Promise((resolve, reject) => {
    const [host, port] = [proxy.slice(0, proxy.lastIndexOf(':')), proxy.slice(proxy.lastIndexOf(':') + 1)];
    const req = http.request({ host, port, path: '/hello', headers: { Host: 'web.test' }, localAddress: from }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.end();
  });

  try {
    // deviceScaleFactor 2 makes the wide shots 3840 px: how a 4K screen
    // draws it.
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, deviceScaleFactor: 2 });
    const page = await ctx.newPage();
    page.setDefaultTimeout(60000);
    watch(page, 'operator');

    // 1. Not signed in: the dashboard sends the browser to sign in.
    await page.goto(admin + '/dashboard');
    out.loginURL = page.url();
    await shoot(page, 'login');

    // 2. A wrong password: the sign-in page again, saying so, with no
    // password dialog of the browser's (watch fails the run on one).
    run.expected = /status of 401/;
    await page.fill('#secret', 'wrong');
    await Promise.all([page.waitForNavigation(), page.click('#signin')]);
    run.expected = null;
    out.wrongPassword = (await page.textContent('#login-error')).trim();

    // 3. The right one: the dashboard.
    await page.fill('#secret', 'pw');
    await Promise.all([page.waitForURL(admin + '/dashboard'), page.click('#signin')]);
    out.cookies = (await ctx.cookies()).map((c) => ({ name: c.name, httpOnly: c.httpOnly, sameSite: c.sameSite, secure: c.secure, path: c.path }));
    const web = page.locator('li.card[data-deployment="web"]');
    await web.locator('[data-state="idle"]').waitFor();
    step('idle');
    await page.locator('#live', { hasText: 'Live.' }).waitFor();
    out.live = await page.textContent('#live');
    await page.locator('[data-tile="deployments"] dd', { hasText: '2' }).waitFor();
    await shoot(page, 'dashboard-idle');

    // 4. A request to the deployment starts a replica; the dashboard
    // shows it ready.
    out.request = await hit();
    await web.locator('[data-state="ready"]').waitFor();
    step('ready');
    out.readyTile = await page.$eval('[data-tile="ready"] dd', (dd) => dd.firstChild.textContent.trim());

    // 4b. The charts: the request on the throughput line, web's boot in
    // the cold-start phases, its replicas on the autoscale chart, each an
    // image with a name and a table of its numbers; the operator's
    // sections list what the test made (a secret, a token, a namespace).
    await page.locator('#chart-rps svg.chart path.line').waitFor();
    await page.locator('#chart-cold svg.chart rect[data-bar="web"]').first().waitFor();
    await page.locator('#chart-scale [data-autoscale="web"] path[data-series="ready"]').waitFor();
    await page.locator('#chart-latency svg.chart rect').first().waitFor();
    await page.locator('#sec-secrets [data-secret="db-password"]').waitFor();
    await page.locator('#sec-tokens [data-token="team"]').waitFor();
    await page.locator('#sec-namespaces [data-namespace="team"]').waitFor();
    out.charts = await page.evaluate(() => {
      const label = (sel) => document.querySelector(sel)?.getAttribute('aria-label') || '';
      return {
        rpsLabel: label('#chart-rps svg.chart'),
        latencyLabel: label('#chart-latency svg.chart'),
        latencyBars: document.querySelectorAll('#chart-latency svg.chart rect').length,
        coldLabel: label('#chart-cold svg.chart'),
        coldParts: document.querySelectorAll('#chart-cold svg.chart rect[data-bar="web"]').length,
        coldTable: [...document.querySelectorAll('#chart-cold table tbody tr')].map((r) => r.textContent),
        scaleLabel: label('#chart-scale [data-autoscale="web"] svg.chart'),
        tables: document.querySelectorAll('#charts details table').length,
        secrets: [...document.querySelectorAll('#sec-secrets [data-secret]')].map((e) => e.dataset.secret),
        tokens: [...document.querySelectorAll('#sec-tokens [data-token]')].map((e) => e.dataset.token),
        namespaces: [...document.querySelectorAll('#sec-namespaces [data-namespace]')].map((e) => e.dataset.namespace),
        certs: document.querySelector('#sec-certs [data-body]').textContent.trim(),
        jobs: document.querySelector('#sec-jobs [data-body]').textContent.trim(),
        secretText: document.querySelector('#sec-secrets').textContent,
      };
    });
    step('charts');

    // 4c. Evict asks first: the confirmation names the replica; cancelled.
    await web.locator('button[data-action="evict"]').first().waitFor();
    out.drainButtons = await web.locator('button[data-action="drain"]').count();
    await web.locator('button[data-action="evict"]').first().click();
    await page.locator('#evict[open]').waitFor();
    out.evictAsk = (await page.textContent('#evict-what')).trim();
    await axe(page, 'dashboard evict dialog');
    await page.click('#evict [data-close]');
    await page.locator('#evict').waitFor({ state: 'hidden' });

    // 5. Scale: an invalid policy is refused and the error shown on the
    // field, then a valid one is saved and shown on the card.
    await web.locator('button[data-action="scale"]').click();
    await page.fill('#scale-min', '3');
    await page.fill('#scale-max', '2');
    run.expected = /status of 400/;
    await page.click('#scale-save');
    await page.locator('#scale-error:not([hidden])').waitFor();
    run.expected = null;
    out.scaleError = (await page.textContent('#scale-error')).trim();
    out.scaleInvalid = await page.getAttribute('#scale-max', 'aria-invalid');
    await page.fill('#scale-min', '1');
    await page.fill('#scale-max', '3');
    await page.click('#scale-save');
    await page.locator('#scale').waitFor({ state: 'hidden' });
    await web.locator('[data-replicas]', { hasText: 'min 1' }).waitFor();
    out.replicas = (await web.locator('[data-replicas]').textContent()).trim();
    step('scaled');

    // 6. Edit: an invalid spec is refused with the validation error on
    // the JSON field.
    await web.locator('button[data-action="edit"]').click();
    await page.locator('#edit-json').waitFor();
    await page.waitForFunction(() => document.getElementById('edit-json').value.includes('"id"'));
    const spec = JSON.parse(await page.inputValue('#edit-json'));
    spec.scaling.max_replicas = -1;
    await page.fill('#edit-json', JSON.stringify(spec, null, 2));
    run.expected = /status of 400/;
    await page.click('#edit-save');
    await page.locator('#edit-error:not([hidden])').waitFor();
    run.expected = null;
    out.editError = (await page.textContent('#edit-error')).trim();
    out.editInvalid = await page.getAttribute('#edit-json', 'aria-invalid');
    await axe(page, 'dashboard edit dialog');
    await page.click('#edit [data-close]');
    // The charts' numbers open, so that axe and the shots see their tables.
    await page.$$eval('#charts details', (ds) => ds.forEach((d) => { d.open = true; }));
    await shoot(page, 'dashboard');
    await page.$$eval('#charts details', (ds) => ds.forEach((d) => { d.open = false; }));
    // The README's picture: 1280 × 800 CSS pixels, at one pixel each.
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: path.join(shots, 'dashboard-1280.png'), scale: 'css' });
    await page.setViewportSize({ width: 1280, height: 900 });

    // 7. The directory.
    await page.click('nav a[href="/"]');
    await page.locator('li.card[data-deployment="web"] [data-state="ready"]').waitFor();
    out.directory = await page.$$eval('#urls li.card h2', (hs) => hs.map((h) => h.textContent.trim()));
    await shoot(page, 'directory');

    // 8. The theme toggle is kept across a reload.
    await page.click('#theme'); // system → light
    await page.click('#theme'); // light → dark
    await page.reload();
    out.theme = await page.evaluate(() => document.documentElement.dataset.theme || '');

    // 9. Sign out: back to sign-in, and the pages want it again.
    await Promise.all([page.waitForURL(/\/login$/), page.click('#signout')]);
    out.cookiesAfterLogout = (await ctx.cookies()).map((c) => c.name);
    await page.goto(admin + '/dashboard');
    out.afterLogoutURL = page.url();
    step('signed out');
    await ctx.close();

    // 10. A namespace-confined token sees its namespace only.
    const tctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const tpage = await tctx.newPage();
    tpage.setDefaultTimeout(60000);
    watch(tpage, 'token');
    // This browser cannot use the event stream: the pages poll instead.
    await tpage.route('**/ui/events*', (route) => route.abort());
    run.expected = /ERR_FAILED/;
    await tpage.goto(admin + '/login');
    await tpage.fill('#secret', teamToken);
    await Promise.all([tpage.waitForURL(admin + '/dashboard'), tpage.click('#signin')]);
    await tpage.locator('li.card[data-deployment="teamapp"]').waitFor();
    await tpage.locator('[data-tile="deployments"] dd', { hasText: '1' }).waitFor();
    out.teamCards = await tpage.$$eval('#deployments li.card', (ls) => ls.map((l) => l.dataset.deployment));
    await tpage.locator('#sec-namespaces [data-namespace="team"]').waitFor();
    out.teamNamespaces = await tpage.$$eval('#sec-namespaces [data-namespace]', (es) => es.map((e) => e.dataset.namespace));
    out.teamCerts = (await tpage.textContent('#sec-certs [data-body]')).trim();
    out.teamCold = (await tpage.textContent('#chart-cold [data-plot]')).trim();
    out.teamWho = (await tpage.textContent('.who')).trim();
    await tpage.locator('#live', { hasText: 'Updated every 2 s' }).waitFor();
    out.teamLive = await tpage.textContent('#live');
    await tpage.goto(admin + '/');
    await tpage.locator('#urls li.card').first().waitFor();
    out.teamDirectory = await tpage.$$eval('#urls li.card', (ls) => ls.map((l) => l.dataset.deployment));
    await Promise.all([tpage.waitForURL(/\/login$/), tpage.click('#signout')]);
    run.expected = null;
    await tctx.close();

    // 11. The operator again, on /siem: the scanner's alert with its
    // runbook; block its client for 15 minutes from the alert, see the
    // rule appear, the client refused and its hit on the rule's sparkline.
    const octx = await browser.newContext({ viewport: { width: 1280, height: 900 }, deviceScaleFactor: 2 });
    const opage = await octx.newPage();
    opage.setDefaultTimeout(60000);
    watch(opage, 'operator');
    await opage.goto(admin + '/siem');
    await opage.fill('#secret', 'pw');
    await Promise.all([opage.waitForURL(admin + '/siem'), opage.click('#signin')]);
    const card = opage.locator(`li.card[data-alert="${alertID}"]`);
    await card.waitFor();
    out.alertClient = (await card.locator('[data-client]').textContent()).trim();
    out.runbook = await card.locator('details ol li').allTextContents();
    await card.locator('select[name="lifetime"]').selectOption('900');
    await card.locator('button[data-action="block"]').click();
    const rule = opage.locator('#rules li.card', { hasText: '127.0.0.2' });
    await rule.waitFor();
    out.ruleSummary = (await rule.locator('h3').textContent()).trim();
    await card.locator('[data-blocked]:not([hidden])').waitFor();
    out.alertBlocked = (await card.locator('[data-blocked]').textContent()).trim();
    out.ruleLifetimeSecs = await opage.evaluate(async () => {
      const s = await (await fetch('/security')).json();
      const r = s.rules.find((x) => x.match.client === '127.0.0.2');
      return r && r.expires_at - r.created_at;
    });
    out.blockedHit = await hit('127.0.0.2');
    await rule.locator('svg.spark:not([data-total="0"])').waitFor();
    out.sparkTotal = Number(await rule.locator('svg.spark').getAttribute('data-total'));
    out.sparkLabel = await rule.locator('svg.spark').getAttribute('aria-label');
    step('blocked');
    await shoot(opage, 'siem');
    await rule.locator('button[data-action="delete"]').click();
    await rule.waitFor({ state: 'detached' });
    await opage.locator('#no-rules:not([hidden])').waitFor();
    out.rulesAfterDelete = await opage.$$eval('#rules li.card', (ls) => ls.map((l) => l.dataset.rule));
    step('rule deleted');

    // 12. /storage: archive a disk (its progress until it succeeds), then
    // purge the retained one, which the dialog asks to force.
    await opage.click('nav a[href="/storage"]');
    const kept = opage.locator(`li.card[data-disk="${retainedDisk}"]`);
    const old = opage.locator(`li.card[data-disk="${archiveDisk}"]`);
    await kept.waitFor();
    out.retainedBadge = (await kept.locator('[data-retained]').textContent()).trim();
    await old.locator('button[data-action="archive"]').click();
    const done = opage.locator(`#archives li.card:has(code:text-is("${archiveDisk}")) [data-status="succeeded"], #archives li.card:has(code:text-is("${archiveDisk}")) [data-status="failed"]`);
    await done.first().waitFor();
    out.archiveStatus = (await done.first().textContent()).trim();
    await old.locator('[data-fate]', { hasText: 'Archived' }).waitFor();
    step('archived');
    await shoot(opage, 'storage');
    await kept.locator('button[data-action="purge"]').click();
    await opage.locator('#purge[open]').waitFor();
    out.purgeForce = (await opage.textContent('#purge-force-label')).trim();
    out.purgeFocus = await opage.evaluate(() => document.activeElement && document.activeElement.id);
    await axe(opage, 'storage purge dialog');
    await opage.check('#purge-force');
    await opage.click('#purge-confirm');
    await opage.locator('#purge').waitFor({ state: 'hidden' });
    await kept.waitFor({ state: 'detached' });
    out.disksAfterPurge = await opage.$$eval('#disks li.card', (ls) => ls.map((l) => l.dataset.disk));
    step('purged');

    // 13. The dashboard: a shell in web's replica, in a terminal.
    await opage.click('nav a[href="/dashboard"]');
    const webCard = opage.locator('li.card[data-deployment="web"]');
    await webCard.locator('[data-state="ready"]').waitFor();
    await webCard.locator('button[data-action="shell"]').click();
    await opage.locator('#shell-state', { hasText: 'Connected to' }).waitFor();
    out.shellState = (await opage.textContent('#shell-state')).trim();
    await opage.locator('#shell-term .xterm-helper-textarea:focus').waitFor();
    await opage.keyboard.type('echo hi-$((40+2))\n');
    await opage.locator('#shell-term .xterm-rows', { hasText: 'hi-42' }).waitFor();
    out.shellText = await opage.evaluate(() => [...document.querySelectorAll('#shell-term .xterm-rows > div')].map((d) => d.textContent.trimEnd()).filter(Boolean).join('\n'));
    step('shell');
    await shoot(opage, 'dashboard-shell');
    await opage.click('#shell-close');
    await opage.locator('#shell').waitFor({ state: 'hidden' });
    out.shellClosedFocus = await opage.evaluate(() => document.activeElement && document.activeElement.dataset.action);
    await octx.close();
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack || err) + '\n');
  process.exit(1);
});
