// The upload page in headless Chromium (Debian's chromium, driven by
// playwright-core): upload a photo, wait, the inscription appears, download it.
//   node tests/service/web_test.js <danqing binary>
'use strict';
const assert = require('assert');
const fs = require('fs');
const path = require('path');
const { startServe } = require('./serve_process');

const ROOT = path.resolve(__dirname, '..', '..');
const { chromium } = require(path.join(ROOT, 'node_modules', 'playwright-core'));

async function main() {
  const binary = process.argv[2];
  assert(binary, 'usage: web_test.js <danqing binary>');
  const svc = await startServe(binary, ['--workers', '2']);
  const browser = await chromium.launch({
    executablePath: process.env.DANQING_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
  try {
    const page = await browser.newPage({ acceptDownloads: true });
    await page.goto(`http://127.0.0.1:${svc.port}/`);
    assert.strictEqual(await page.title(), '丹青识画 · Danqing');
    await page.setInputFiles('#photo', path.join(ROOT, 'tests', 'data', 'photos', 'hubble_deep_field.jpg'));
    await page.selectOption('#style', 'kai');
    await page.click('#go');
    // Progress is shown while the request runs, then the result.
    await page.waitForSelector('#result', { state: 'visible', timeout: 120000 });
    const status = await page.textContent('#status');
    assert.match(status, /Done/);
    const verse = (await page.textContent('#verse')).trim();
    assert.ok(verse.split('\n').length >= 4, 'a verse of at least four lines: ' + verse);
    const themes = await page.textContent('#themes');
    assert.match(themes, /月夜/, 'a night photo gets the moonlit-night theme: ' + themes);
    const natural = await page.$eval('#inscription', (img) => [img.naturalWidth, img.naturalHeight]);
    assert.ok(natural[0] > 0 && natural[1] > 0, 'the image loaded');

    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#download')]);
    assert.match(download.suggestedFilename(), /^danqing-[0-9a-f]{32}\.jpg$/);
    const file = await download.path();
    const head = fs.readFileSync(file).subarray(0, 3);
    assert.deepStrictEqual([...head], [0xff, 0xd8, 0xff], 'a JPEG was downloaded (format=auto)');

    // The address is the inscription's own (/i/<id>): a reload shows it
    // again, with its short address and QR code.
    assert.match(page.url(), /\/i\/[0-9a-f]{32}$/);
    const id = /\/i\/([0-9a-f]{32})$/.exec(page.url())[1];
    await page.reload();
    await page.waitForSelector('#result', {state: 'visible', timeout: 30000});
    assert.strictEqual(
        (await page.textContent('#verse')).trim(), verse, 'the same verse after a reload');
    assert.match(await page.textContent('#shareurl'), new RegExp('/i/' + id + '$'));
    const qr = await page.$eval('#qr', (img) => img.naturalWidth);
    assert.ok(qr > 0, 'the QR code loaded');

    // A 429 (the shared queue full) is retried after its Retry-After, and the
    // position in the queue is shown while the job waits.
    let refused = 0;
    await page.route('**/v1/inscriptions?*', (route) => {
      if (route.request().method() === 'POST' && refused === 0) {
        refused++;
        return route.fulfill({
          status: 429,
          headers: {'Retry-After': '1', 'Content-Type': 'application/json'},
          body: JSON.stringify({
            error:
                'the shared queue holds 12 inscriptions, more than can be finished within the deadline',
            status: 429
          }),
        });
      }
      return route.continue();
    });
    await page.route('**/events', (route) => {
      const jobId = /inscriptions\/([0-9a-f]{32})\/events/.exec(route.request().url())[1];
      const ev = {id: jobId, state: 'queued', position: 2, estimate_s: 3};
      return route.fulfill({
        status: 200,
        headers: {'Content-Type': 'text/event-stream'},
        body: 'event: status\ndata: ' + JSON.stringify(ev) + '\n\n'
      });
    });
    await page.setInputFiles('#photo', path.join(ROOT, 'tests', 'data', 'photos', 'coffee.jpg'));
    await page.click('#go');
    await page.waitForFunction(
        () => /retrying in/.test(document.getElementById('status').textContent), null,
        {timeout: 10000});
    await page.waitForFunction(
        () => /Position 3 in the queue/.test(document.getElementById('status').textContent), null,
        {timeout: 20000});
    await page.waitForFunction(
        () => /Done/.test(document.getElementById('status').textContent), null, {timeout: 60000});
    assert.strictEqual(refused, 1);
    assert.notStrictEqual(/\/i\/([0-9a-f]{32})$/.exec(page.url())[1], id, 'a new inscription');
    await page.unroute('**/v1/inscriptions?*');
    await page.unroute('**/events');

    // The wall shows the newest inscriptions.
    const wall = await browser.newPage();
    await wall.goto(`http://127.0.0.1:${svc.port}/wall`);
    await wall.waitForSelector(`figure[data-id="${id}"] img`, {timeout: 10000});
    await wall.close();

    // A non-image is refused with a message on the page, not a broken image.
    fs.writeFileSync('/tmp/danqing-web-test-not-an-image.jpg', 'not an image');
    await page.setInputFiles('#photo', '/tmp/danqing-web-test-not-an-image.jpg');
    await page.click('#go');
    await page.waitForSelector('#status.error', { timeout: 30000 });
    assert.match(await page.textContent('#status'), /not a PNG or JPEG/);
    fs.unlinkSync('/tmp/danqing-web-test-not-an-image.jpg');
  } finally {
    await browser.close();
    svc.child.kill('SIGTERM');
  }
  const { code } = await svc.exited;
  assert.strictEqual(code, 0, 'danqing serve exits 0 after SIGTERM');
  console.log('web_test: PASS');
}

main().catch((e) => {
  console.error('web_test: FAIL', e);
  process.exit(1);
});
