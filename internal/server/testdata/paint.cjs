// paint.cjs measures the dashboard's first paint (BenchmarkDashboardPaint):
// it signs in once, then loads /dashboard n times in fresh pages of the
// same context (its assets revalidated by ETag, as a returning operator's
// are) and prints, for each load, the first contentful paint and the time
// until the tiles hold the fleet's figures (the first answer of the admin
// API drawn), in milliseconds from navigation start.
//
// usage: node paint.cjs <admin origin> <password> <n>
const { chromium } = require('playwright-core');

async function main() {
  const [admin, password, n] = process.argv.slice(2);
  const browser = await chromium.launch({
    executablePath: process.env.BERTH_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
    timeout: 60000,
  });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const login = await ctx.newPage();
  await login.goto(admin + '/login?next=/dashboard');
  await login.fill('#secret', password);
  await Promise.all([login.waitForURL(admin + '/dashboard'), login.click('#signin')]);
  await login.close();
  const out = { fcp: [], data: [] };
  for (let i = 0; i < Number(n); i++) {
    const page = await ctx.newPage();
    await page.goto(admin + '/dashboard', { waitUntil: 'load' });
    await page.locator('[data-tile="deployments"] dd').waitFor();
    const t = await page.evaluate(() => {
      const p = performance.getEntriesByName('first-contentful-paint')[0];
      return { fcp: p ? p.startTime : -1, data: performance.now() };
    });
    out.fcp.push(t.fcp);
    out.data.push(t.data);
    await page.close();
  }
  await browser.close();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => { console.error(e); process.exit(1); });
