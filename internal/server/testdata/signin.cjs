// signin.cjs drives headless Chromium through a gated deployment's sign-in
// (TestBrowserSignIn): the choice page, the OpenID Provider's redirects,
// the app with the identity berth forwards, sign-out, and the way back to
// sign-in. It prints one JSON object of what it saw; the Go test asserts.
//
// usage: node signin.cjs <app origin> <screenshot path>
// NODE_PATH must name a node_modules holding playwright-core.
const { chromium } = require('playwright-core');

async function main() {
  const [appOrigin, shot] = process.argv.slice(2);
  const app = new URL(appOrigin);
  const browser = await chromium.launch({
    executablePath: process.env.BERTH_CHROMIUM || '/usr/bin/chromium',
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      // The app's name resolves to berth's proxy on loopback.
      `--host-resolver-rules=MAP ${app.hostname} 127.0.0.1`,
    ],
    timeout: 60000,
  });
  const out = {};
  try {
    const ctx = await browser.newContext({
      // A client claiming an identity: berth must strip it.
      extraHTTPHeaders: { 'X-Auth-Request-User': 'mallory' },
    });
    const page = await ctx.newPage();
    page.setDefaultTimeout(30000);

    // 1. The app, not signed in: the choice page.
    let resp = await page.goto(appOrigin + '/hello?x=1');
    out.choiceStatus = resp.status();
    out.choiceTitle = await page.title();
    out.choiceLinks = await page.$$eval('a.button', (as) => as.map((a) => a.textContent.trim()));
    await page.screenshot({ path: shot, fullPage: true });

    // 2. Sign in with the OpenID Provider: its redirects, the callback,
    // and back to the page first asked for.
    await Promise.all([page.waitForURL(appOrigin + '/hello?x=1'), page.click('a.button >> nth=0')]);
    out.appURL = page.url();
    out.appBody = JSON.parse(await page.textContent('body'));
    out.cookies = (await ctx.cookies()).map((c) => ({ name: c.name, httpOnly: c.httpOnly, sameSite: c.sameSite, domain: c.domain }));

    // 3. Sign out: the session ends, and the app asks to sign in again.
    resp = await page.goto(appOrigin + '/__applb/auth/logout');
    out.afterLogoutURL = page.url();
    out.afterLogoutStatus = resp.status();
    out.afterLogoutTitle = await page.title();
    out.cookiesAfterLogout = (await ctx.cookies()).map((c) => c.name);
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack || err) + '\n');
  process.exit(1);
});
