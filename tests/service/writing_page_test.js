// Issue 28: the page plays the writing, in headless Chromium (Debian's
// chromium, playwright-core). For every style and background, vertical and
// horizontal: frames at several times show more and more of the final image
// (monotonically), a frame mid-way shows wet ink (neither the background nor
// the final pixel), the last frame equals the final image exactly, and the
// replay and skip buttons work. The upload form plays it too.
//   node tests/service/writing_page_test.js <danqing binary>
'use strict';
const assert = require('assert');
const fs = require('fs');
const path = require('path');
const {startServe} = require('./serve_process');

const ROOT = path.resolve(__dirname, '..', '..');
const {chromium} = require(path.join(ROOT, 'node_modules', 'playwright-core'));
const PHOTO = path.join(ROOT, 'tests', 'data', 'photos', 'hubble_deep_field.jpg');

// In the page: upload with `query`, play the writing, then frames at
// fractions of its length. Returns, per frame, how many pixels equal the
// final image, how many are wet (equal neither), and whether the last frame
// equals the final image.
async function framesFor(page, b64, query) {
  return page.evaluate(async ({b64, query}) => {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const res = await fetch(
        '/v1/inscriptions?response=json&writing=true&width=480&height=320&' + query,
        {method: 'POST', body: bytes, headers: {Accept: 'application/json'}});
    if (!res.ok) throw new Error('POST: ' + res.status + ' ' + (await res.text()));
    const body = await res.json();
    const W = window.danqingWriting;
    await W.play(body);
    W.skip();
    const img = new Image();
    img.src = body.image_url;
    await img.decode();
    const c = document.createElement('canvas');
    c.width = img.naturalWidth;
    c.height = img.naturalHeight;
    const g = c.getContext('2d');
    g.drawImage(img, 0, 0);
    const fin = g.getImageData(0, 0, c.width, c.height).data;
    const bgImg = new Image();
    bgImg.src = body.writing.background_url;
    await bgImg.decode();
    g.drawImage(bgImg, 0, 0);
    const bg = g.getImageData(0, 0, c.width, c.height).data;
    const canvas = document.getElementById('writing-canvas');
    const ctx = canvas.getContext('2d');
    const out = [];
    for (const f of [0, 0.2, 0.4, 0.6, 0.8, 1]) {
      const t = Math.round(f * W.duration);
      W.seek(t);
      const d = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
      let same = 0, wet = 0;
      for (let i = 0; i < d.length; i += 4) {
        const isFin = d[i] === fin[i] && d[i + 1] === fin[i + 1] && d[i + 2] === fin[i + 2];
        const isBg = d[i] === bg[i] && d[i + 1] === bg[i + 1] && d[i + 2] === bg[i + 2];
        if (isFin)
          same++;
        else if (!isBg)
          wet++;
      }
      out.push({t, same, wet, total: d.length / 4});
    }
    // Replay goes back to the start; skip to the end.
    document.getElementById('writing-replay').click();
    await new Promise((r) => setTimeout(r, 50));
    let d = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    let sameAfterReplay = 0;
    for (let i = 0; i < d.length; i += 4)
      if (d[i] === fin[i] && d[i + 1] === fin[i + 1] && d[i + 2] === fin[i + 2]) sameAfterReplay++;
    document.getElementById('writing-skip').click();
    d = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    let sameAfterSkip = 0;
    for (let i = 0; i < d.length; i += 4)
      if (d[i] === fin[i] && d[i + 1] === fin[i + 1] && d[i + 2] === fin[i + 2]) sameAfterSkip++;
    return {
      frames: out,
      duration: W.duration,
      sameAfterReplay,
      sameAfterSkip,
      videoUrl: body.writing.video_url
    };
  }, {b64, query});
}

async function main() {
  const binary = process.argv[2];
  assert(binary, 'usage: writing_page_test.js <danqing binary>');
  const svc = await startServe(binary, ['--workers', '2']);
  const browser = await chromium.launch({
    executablePath: process.env.DANQING_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
  try {
    const page = await browser.newPage();
    await page.goto(`http://127.0.0.1:${svc.port}/`);
    const b64 = fs.readFileSync(PHOTO).toString('base64');
    const cases = [
      'style=kai&background=paper&vertical=true',
      'style=xing&background=landscape&vertical=false',
      'style=cao&background=photo&vertical=true',
      'style=xing&background=paper&vertical=false&text=' +
          encodeURIComponent('春眠不觉晓，处处闻啼鸟。'),
    ];
    for (const q of cases) {
      const r = await framesFor(page, b64, q);
      const f = r.frames;
      assert.ok(r.duration >= 1000, q + ': a writing of a second or more: ' + r.duration);
      for (let k = 1; k < f.length; k++) {
        assert.ok(
            f[k].same >= f[k - 1].same,
            `${q}: more ink at t=${f[k].t} than at t=${f[k - 1].t}: ` + JSON.stringify(f));
      }
      assert.ok(f[0].same < f[f.length - 1].same, q + ': the start is not the end');
      assert.ok(f[2].same < f[f.length - 1].same, q + ': mid-way is not the end');
      assert.ok(
          f.slice(1, 4).some((x) => x.wet > 0),
          q + ': wet ink behind the brush mid-way: ' + JSON.stringify(f));
      const last = f[f.length - 1];
      assert.strictEqual(last.same, last.total, q + ': the last frame equals the final image');
      assert.ok(r.sameAfterReplay < last.total, q + ': replay starts again');
      assert.strictEqual(r.sameAfterSkip, last.total, q + ': skip shows the final image');
      console.log(
          `writing_page_test: ${q}: ${JSON.stringify(f.map((x) => x.same))} of ${last.total}`);
    }

    // The upload form asks for the writing and plays it; the video link is there.
    await page.setInputFiles('#photo', PHOTO);
    await page.click('#go');
    await page.waitForSelector('#writing', {state: 'visible', timeout: 120000});
    await page.waitForFunction(() => window.danqingWriting.ready, null, {timeout: 30000});
    const href = await page.getAttribute('#writing-video', 'href');
    assert.match(href, /^\/v1\/inscriptions\/[0-9a-f]{32}\/video\?download=1$/);
    const head = await page.evaluate(async (u) => {
      const r = await fetch(u.replace('download=1', 'fps=10&seconds=2'));
      const b = new Uint8Array(await r.arrayBuffer());
      return {
        status: r.status,
        type: r.headers.get('content-type'),
        ftyp: String.fromCharCode(...b.subarray(4, 8))
      };
    }, href);
    assert.deepStrictEqual(head, {status: 200, type: 'video/mp4', ftyp: 'ftyp'});
  } finally {
    await browser.close();
    svc.child.kill('SIGTERM');
  }
  const {code} = await svc.exited;
  assert.strictEqual(code, 0, 'danqing serve exits 0 after SIGTERM');
  console.log('writing_page_test: PASS');
}

main().catch((e) => {
  console.error('writing_page_test: FAIL', e);
  process.exit(1);
});
