// The upload page in headless Chromium (Debian's chromium, driven by
// playwright-core): upload a photo, wait, the inscription appears, download it;
// then against a second server whose queue other visitors really filled: a
// 429, the page's own retry, its position counting down, the result.
//   node tests/service/web_test.js <danqing binary>
'use strict';
const assert = require('assert');
const fs = require('fs');
const path = require('path');
const http = require('http');
const os = require('os');
const {spawnSync} = require('child_process');
const {get, startServe} = require('./serve_process');

const ROOT = path.resolve(__dirname, '..', '..');
const { chromium } = require(path.join(ROOT, 'node_modules', 'playwright-core'));

// POSTs a raw image from `localAddress` (a loopback address of its own: each
// fill is another visitor, as the server tells them apart by address).
function postFrom(port, localAddress, query, body, type) {
  return new Promise((resolve, reject) => {
    const req = http.request(
        {
          host: '127.0.0.1',
          port,
          localAddress,
          method: 'POST',
          path: '/v1/inscriptions?' + query,
          headers: {'Content-Type': type, 'Accept': 'application/json'},
        },
        (res) => {
          const chunks = [];
          res.on('data', (c) => chunks.push(c));
          res.on(
              'end',
              () => resolve({status: res.statusCode, body: Buffer.concat(chunks).toString()}));
        });
    req.on('error', reject);
    req.end(body);
  });
}

// The page against a server whose queue is really over-full: one worker and
// a queue bound of kBound (--queue; with a 1 s deadline the bound from the
// drain rate, at most a job per second, is below it), filled by other
// visitors with the slowest inscriptions the API offers: the largest canvas,
// a 33-megapixel photo as background, 192 characters, the writing recorded
// (about 2 s each on one CPU core here; the first, rendering while the page
// uploads, from a PNG photo that takes longer to decode: about 3.3 s). The
// page's upload gets a real 429 with Retry-After, waits, retries on its own,
// is queued (its position, counting down, from the server's event stream)
// and shows the result.
async function busyQueue(binary, browser) {
  const kBound = 6;
  const kFills = kBound + 1;  // 1 rendering, kBound waiting: the queue is full
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'danqing-web-busy-'));
  // Two 7680x4320 photos (danqing's own renders): a PNG for the first fill, JPEGs for the rest.
  const photos = {};
  for (const ext of ['png', 'jpg']) {
    photos[ext] = path.join(dir, 'big.' + ext);
    const made = spawnSync(binary, [
      'render', '--text', '春眠不觉晓，处处闻啼鸟。', '--size', '7680x4320', '--backend', 'cpu',
      '-o', photos[ext]
    ]);
    assert.strictEqual(made.status, 0, 'the large photo was made: ' + made.stderr);
  }
  const busy = await startServe(binary, [
    '--workers', '1', '--queue', String(kBound), '--deadline-ms', '1000'
  ].concat('--max-canvas 7680 --max-upload-mb 40 --backend cpu'.split(' ')));
  const page = await browser.newPage();
  try {
    const refusals = [];
    let streams = 0, firstFillAt = 0, first429At = 0;
    page.on('response', (r) => {
      if (r.request().method() === 'POST' && r.status() === 429) {
        refusals.push(Number(r.headers()['retry-after']));
        if (!first429At) first429At = Date.now();
      }
      if (/\/events$/.test(r.url()) && r.status() === 200 &&
          /text\/event-stream/.test(r.headers()['content-type'] || '')) {
        streams++;
      }
    });
    await page.goto(`http://127.0.0.1:${busy.port}/`);
    // Every text the status line shows, in order.
    await page.evaluate(() => {
      window.seen = [];
      const s = document.getElementById('status');
      new MutationObserver(() => {
        if (window.seen[window.seen.length - 1] !== s.textContent) window.seen.push(s.textContent);
      }).observe(s, {childList: true, characterData: true, subtree: true});
    });
    await page.setInputFiles('#photo', path.join(ROOT, 'tests', 'data', 'photos', 'coffee.jpg'));
    await page.selectOption('#style', 'kai');

    const png = fs.readFileSync(photos.png), jpeg = fs.readFileSync(photos.jpg);
    const text = encodeURIComponent('鬱'.repeat(64));
    const title = encodeURIComponent('龘'.repeat(64));
    const slow = `wait=0&width=7680&height=4320&style=cao&background=photo&writing=true` +
        `&text=${text}&title=${title}&signature=${title}`;
    // One slow inscription first, waited for: the server's Retry-After then
    // comes from a measured job time, not its cold-start guess of 1 s per
    // job (with which a slow build, a sanitizer's, would have the page spend
    // its 20 tries while the first fill renders).
    const warm = await postFrom(busy.port, '127.0.0.30', slow, png, 'image/png');
    assert.strictEqual(warm.status, 202, 'the first inscription accepted: ' + warm.body);
    // Until the job `id` is in `want` (polled every 50 ms, at most 3 minutes).
    const until = async (id, want) => {
      for (let n = 0; n < 3600; n++) {
        const r = await get(busy.port, '/v1/inscriptions/' + id);
        const state = JSON.parse(r.body.toString()).state;
        assert.ok(state !== 'failed', id + ' failed: ' + r.body);
        if (want.includes(state)) return;
        await new Promise((res) => setTimeout(res, 50));
      }
      assert.fail(id + ' never reached ' + want);
    };
    await until(JSON.parse(warm.body).id, ['done']);
    const fills = [];
    for (let i = 0; i < kFills; i++) {
      const r = await postFrom(
          busy.port, '127.0.0.' + (2 + i), slow, i === 0 ? png : jpeg,
          i === 0 ? 'image/png' : 'image/jpeg');
      assert.strictEqual(r.status, 202, 'fill ' + i + ' accepted: ' + r.body);
      fills.push(JSON.parse(r.body).id);
      if (i === 0) {
        firstFillAt = Date.now();
        // On the worker (out of the queue) before the others come: they
        // then fill the queue to its bound exactly.
        await until(fills[0], ['rendering', 'done']);
      }
    }
    await page.click('#go');
    await page.waitForFunction(
        () => /Done/.test(document.getElementById('status').textContent), null, {timeout: 150000});
    const seen = await page.evaluate(() => window.seen);
    console.log('web_test: the page said, in order:\n  ' + seen.join('\n  '));
    console.log('web_test: 429s seen by the page, Retry-After: ' + refusals.join(', '));
    // The margin: the first fill renders for about 3.3 s (the page's 429 needs it still rendering).
    console.log(`web_test: the page's first 429 came ${
        first429At - firstFillAt} ms after the first fill was accepted`);
    assert.ok(refusals.length >= 1, 'the page got a real 429');
    assert.ok(refusals.every((s) => s >= 1), 'each 429 had a Retry-After: ' + refusals);
    assert.ok(streams >= 1, 'the page followed the server\'s event stream');
    const at = (re) => seen.findIndex((t) => re.test(t));
    const retrying = at(/queue holds \d+ inscriptions.*retrying in \d+ s/);
    const queued = at(/Position \d+ in the queue/);
    const done = at(/Done/);
    assert.ok(retrying >= 0, 'the page said it retries after the 429');
    assert.strictEqual(
        Number(/retrying in (\d+) s/.exec(seen[retrying])[1]), refusals[0],
        'the page waits as the server\'s Retry-After says');
    assert.ok(queued > retrying, 'then the position in the queue');
    assert.ok(done > queued, 'then the result');
    const positions = seen.map((t) => /Position (\d+) in the queue/.exec(t))
                          .filter((m) => m)
                          .map((m) => Number(m[1]));
    assert.ok(
        positions.every((p, i) => i === 0 || p <= positions[i - 1]),
        'the position counts down: ' + positions);
    assert.ok(new Set(positions).size >= 2, 'the position changed while queued: ' + positions);
    assert.ok(positions[0] <= kBound, 'the page was admitted within the bound: ' + positions);
    // The result is the page's own inscription, not one of the fills.
    const id = /\/i\/([0-9a-f]{32})$/.exec(page.url())[1];
    assert.ok(!fills.includes(id), 'the page shows its own inscription');
    await page.waitForSelector('#result', {state: 'visible', timeout: 30000});
    const natural = await page.$eval('#inscription', (img) => img.naturalWidth);
    assert.ok(natural > 0, 'the image loaded');
    assert.ok((await page.textContent('#verse')).trim().split('\n').length >= 4, 'a verse');
    // Every fill finished too (nothing accepted was lost).
    for (const f of fills) {
      const r = await get(busy.port, '/v1/inscriptions/' + f);
      assert.strictEqual(r.status, 200);
      assert.strictEqual(JSON.parse(r.body.toString()).state, 'done', 'fill ' + f + ' done');
    }
  } finally {
    await page.close();
    busy.child.kill('SIGTERM');
    fs.rmSync(dir, {recursive: true, force: true});
  }
  const {code} = await busy.exited;
  assert.strictEqual(code, 0, 'the busy server exits 0 after SIGTERM');
}

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

    // A 429 from a really over-full server: see busyQueue below.
    await busyQueue(binary, browser);

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
