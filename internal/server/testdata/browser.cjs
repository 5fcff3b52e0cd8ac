// browser.cjs is what the browser scripts (ui.cjs, ui_pages.cjs) share:
// Chromium's launch, the console watch, axe-core runs and the screenshots.
// Each script prints the run's `out` (consoleErrors, axe, axeRuns, shots,
// steps, and its own findings) as one JSON object; the Go test checks the
// shared part (browserRun in browser_test.go).
const { chromium } = require('playwright-core');
const path = require('node:path');
const fs = require('node:fs');

// axe-core is evaluated in the page (devtools evaluation is not subject to
// the pages' CSP, which refuses injected scripts: the run keeps the CSP on,
// so a page that breaks it logs the console error the run fails on).
const axeSource = fs.readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

// start launches Chromium and returns the run: screenshots go to shots.
async function start(shots) {
  const browser = await chromium.launch({
    executablePath: process.env.BERTH_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout: 60000,
  });
  const out = { consoleErrors: [], axe: [], axeRuns: [], shots: [], steps: [] };
  const run = {
    browser,
    out,
    // expected: errors the browser logs for answers the run asked for on
    // purpose (a wrong password, an invalid config) are not the page's.
    expected: null,
    step: (s) => out.steps.push(s),
    watch: (page, who) => {
      page.on('console', (m) => {
        if (m.type() !== 'error') return;
        const text = m.text();
        if (run.expected && run.expected.test(text)) return;
        out.consoleErrors.push(`${who} ${page.url()}: ${text}`);
      });
      page.on('pageerror', (e) => out.consoleErrors.push(`${who} ${page.url()}: ${e}`));
      page.on('dialog', (d) => { out.consoleErrors.push(`${who}: unexpected dialog ${d.type()} ${d.message()}`); d.dismiss(); });
    },
    axe: async (page, name) => {
      await page.evaluate(axeSource);
      const r = await page.evaluate(async () => await window.axe.run(document, { resultTypes: ['violations'] }));
      out.axeRuns.push({ page: name, rules: r.passes.length + r.violations.length + r.incomplete.length });
      for (const v of r.violations) {
        out.axe.push({ page: name, id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' ')) });
      }
    },
    // shoot saves the page in light and dark at 360 px and wide (1920 px
    // at device scale 2: a 4K screen), and runs axe in each theme.
    shoot: async (page, name) => {
      for (const scheme of ['light', 'dark']) {
        await page.emulateMedia({ colorScheme: scheme });
        for (const [w, h, label] of [[360, 760, '360'], [1920, 1080, 'wide']]) {
          await page.setViewportSize({ width: w, height: h });
          const file = path.join(shots, `${name}-${scheme}-${label}.png`);
          await page.screenshot({ path: file, fullPage: true });
          out.shots.push(file);
        }
        await run.axe(page, `${name} (${scheme})`);
      }
      await page.emulateMedia({ colorScheme: 'light' });
      await page.setViewportSize({ width: 1280, height: 900 });
    },
  };
  return run;
}

module.exports = { start };
