// ui_pages.cjs drives headless Chromium through berth's network, plugins
// and Computers pages (TestBrowserUIPages): sign in from /network, read
// the topology and its tables; on /plugins disable and enable obs, an
// invalid config and a bad namespace (their errors on the fields), and
// enable the demo plugin, uninstall it from namespace team and install
// it there again; on the Computers page follow
// desk's facts, one of them made while the page watches; then a
// namespace-confined token's view. Every page is checked with axe-core
// and screenshotted in light and dark, at 360 px and wide. It prints one
// JSON object of what it saw; the Go test asserts.
//
// usage: node ui_pages.cjs <admin origin> <team token> <screenshot dir>
// NODE_PATH must name a node_modules holding playwright-core and axe-core.
const { start } = require('./browser.cjs');

async function main() {
  const [admin, teamToken, shots] = process.argv.slice(2);
  const run = await start(shots);
  const { browser, out, watch, step, axe, shoot } = run;
  let current = null; // the page in use, whose status line a failure reports
  const basic = 'Basic ' + Buffer.from('admin:pw').toString('base64');
  // adminAPI calls the admin API as the operator, outside the page.
  const adminAPI = async (method, p, body) => {
    const r = await fetch(admin + p, { method, headers: { Authorization: basic, 'Content-Type': 'application/json' }, body: body && JSON.stringify(body) });
    if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${await r.text()}`);
    return r.json();
  };

  try {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, deviceScaleFactor: 2 });
    const page = await ctx.newPage();
    page.setDefaultTimeout(60000);
    watch(page, 'operator');
    current = page;

    // 1. /network, not signed in: sign in, and back to /network.
    await page.goto(admin + '/network');
    await page.fill('#secret', 'pw');
    await Promise.all([page.waitForURL(admin + '/network'), page.click('#signin')]);
    out.networkURL = page.url();
    await page.locator('#routes tr[data-deployment="web"] [data-state="ready"]').waitFor();
    await page.locator('#topo-wrap svg .node.backend').first().waitFor();
    await page.locator('#live', { hasText: 'Live.' }).waitFor();
    out.routeRows = await page.$$eval('#routes tr', (trs) => trs.map((tr) => [...tr.children].map((c) => c.textContent.trim())));
    out.topologyText = await page.$$eval('#topo-wrap svg .node text.label', (ts) => ts.map((t) => t.textContent));
    out.listeners = await page.$$eval('#listeners li', (ls) => ls.map((l) => l.textContent.trim()));
    step('network');
    await shoot(page, 'network');

    // 2. /plugins: obs disabled, then enabled again.
    await page.click('nav a[href="/plugins"]');
    const obs = page.locator('li.card[data-plugin="obs"]');
    await obs.locator('[data-tag]').waitFor();
    out.obsTags = [await obs.locator('[data-tag]').getAttribute('data-tag')];
    await obs.locator('button[data-action="disable"]').click();
    await obs.locator('[data-tag="disabled"]').waitFor();
    out.obsTags.push(await obs.locator('[data-tag]').getAttribute('data-tag'));
    await obs.locator('button[data-action="enable"]').click();
    await obs.locator('[data-tag="enabled"]').waitFor();
    out.obsTags.push(await obs.locator('[data-tag]').getAttribute('data-tag'));
    out.obsInstalls = (await obs.locator('[data-installs]').textContent()).trim();
    step('obs switched');

    // An invalid config: the server's error on the field.
    run.expected = /status of 400/;
    await page.fill('#cfg-obs', '{"nope": 1}');
    await obs.locator('button[data-action="save"]').click();
    await page.locator('#cfg-obs-error:not([hidden])').waitFor();
    out.configError = (await page.textContent('#cfg-obs-error')).trim();
    out.configInvalid = await page.getAttribute('#cfg-obs', 'aria-invalid');
    await obs.locator('button[data-action="revert"]').click();

    // Install the demo plugin, which is off until the operator enables
    // it: a bad namespace first.
    const demo = page.locator('li.card[data-plugin="demo"]');
    await demo.locator('button[data-action="enable"]').click();
    await demo.locator('[data-tag="enabled"]').waitFor();
    // Enabling installed it in the namespaces there are; uninstall it
    // from team to install it there again.
    const installed = () => page.$$eval('li.card[data-plugin="demo"] [data-install-list] li[data-namespace]', (ls) => ls.map((l) => l.dataset.namespace));
    await page.locator('li.card[data-plugin="demo"] li[data-namespace="team"]').waitFor();
    out.installedOnEnable = await installed();
    await demo.locator('li[data-namespace="team"] button[data-action="uninstall"]').click();
    await page.locator('li.card[data-plugin="demo"] li[data-namespace="team"]').waitFor({ state: 'detached' });
    out.installedAfterUninstall = await installed();
    await page.fill('#ns-demo', 'Bad_NS');
    await demo.locator('button[data-action="install"]').click();
    await page.locator('#ns-demo-error:not([hidden])').waitFor();
    out.namespaceError = (await page.textContent('#ns-demo-error')).trim();
    run.expected = null;
    await page.fill('#ns-demo', 'team');
    await demo.locator('button[data-action="install"]').click();
    await page.locator('li.card[data-plugin="demo"] li[data-namespace="team"]').waitFor();
    out.installed = await installed();
    step('demo installed');
    await shoot(page, 'plugins');

    // 3. The Computers page: desk's facts, live.
    await page.click('nav a[href="/ui/computers"]');
    await page.locator('#computers tr[data-computer="desk"]').waitFor();
    out.computerRows = await page.$$eval('#computers tr', (trs) => trs.map((tr) => tr.dataset.computer));
    out.deskState = await page.getAttribute('#computers tr[data-computer="desk"] [data-state]', 'data-state');
    await page.locator('#computers tr[data-computer="desk"] button[data-action="facts"]').click();
    await page.locator('#facts li[data-kind="files.written"]').waitFor();
    await page.locator('#facts-live', { hasText: 'Live.' }).waitFor();
    out.factKinds = [...new Set(await page.$$eval('#facts li', (ls) => ls.map((l) => l.dataset.kind)))];
    await adminAPI('POST', '/computers/desk/files/write', { path: 'live.txt', content: 'written while the page watches' });
    await page.locator('#facts li[data-kind="files.written"]', { hasText: 'live.txt' }).waitFor();
    out.liveFact = (await page.locator('#facts li').first().textContent()).trim();
    out.factsLive = (await page.textContent('#facts-live')).trim();
    await page.locator('#usage tr[data-runtime]').first().waitFor();
    out.usageRows = await page.$$eval('#usage tr[data-runtime] th', (ths) => ths.map((t) => t.textContent.trim()));
    step('facts');
    await shoot(page, 'computers');
    await ctx.close();

    // 4. A token confined to team: its Computer only; the plugins are not its.
    const tctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const tpage = await tctx.newPage();
    tpage.setDefaultTimeout(60000);
    watch(tpage, 'token');
    current = tpage;
    await tpage.goto(admin + '/login?next=' + encodeURIComponent('/ui/computers'));
    await tpage.fill('#secret', teamToken);
    await Promise.all([tpage.waitForURL(admin + '/ui/computers'), tpage.click('#signin')]);
    await tpage.locator('#computers tr[data-computer]').first().waitFor();
    await tpage.locator('#scope:not([hidden])').waitFor();
    out.teamComputerRows = await tpage.$$eval('#computers tr', (trs) => trs.map((tr) => tr.dataset.computer));
    out.teamScope = (await tpage.textContent('#scope')).trim();
    await axe(tpage, 'computers (team)');
    await tpage.click('nav a[href="/plugins"]');
    await tpage.locator('#live', { hasText: 'operator' }).waitFor();
    out.teamPlugins = (await tpage.textContent('#live')).trim();
    await axe(tpage, 'plugins (team)');
    await tctx.close();
  } catch (err) {
    // What the run saw so far says where it stopped.
    if (current) out.failedAt = { url: current.url(), status: await current.textContent('#live').catch(() => null), errors: await current.$$eval('.field-error:not([hidden]), .error', (ps) => ps.map((p) => p.textContent)).catch(() => null) };
    process.stderr.write('the run so far: ' + JSON.stringify(out) + '\n');
    throw err;
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack || err) + '\n');
  process.exit(1);
});
