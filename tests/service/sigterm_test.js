// SIGTERM drains the real process: readiness turns off at once while the port
// still serves requests for --drain-delay (proxies learn of the endpoint's
// removal late); a render in flight when the signal comes still gets its
// image; the process exits 0.
//   node tests/service/sigterm_test.js <danqing binary>
'use strict';
const assert = require('assert');
const fs = require('fs');
const net = require('net');
const path = require('path');
const { get, post, startServe } = require('./serve_process');

const ROOT = path.resolve(__dirname, '..', '..');

async function main() {
  const binary = process.argv[2];
  assert(binary, 'usage: sigterm_test.js <danqing binary>');
  // Idle: not ready at once, but still serving (before, the port closed within
  // milliseconds and requests routed here meanwhile were refused).
  const idle = await startServe(binary, ['--drain-delay', '3']);
  idle.child.kill('SIGTERM');
  for (;;) {
    if ((await get(idle.port, '/readyz')).status === 503) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  const photo = fs.readFileSync(path.join(ROOT, 'tests', 'data', 'photos', 'rocket.jpg'));
  const during = await post(idle.port, '/v1/inscriptions?width=256&height=256', photo, {
    'Content-Type': 'image/jpeg',
    'Content-Length': photo.length,
  });
  assert.strictEqual(during.status, 200, 'served while the endpoint goes away: ' + during.body.toString().slice(0, 200));
  assert.strictEqual((await idle.exited).code, 0, 'exit 0 after the delay and a clean drain');

  const svc = await startServe(binary, ['--workers', '1', '--drain-timeout', '120', '--drain-delay', '1']);
  const inFlight = post(svc.port, '/v1/inscriptions?width=2048&height=2048', photo, {
    'Content-Type': 'image/jpeg',
    'Content-Length': photo.length,
  });
  // Wait until the render is running, then ask the process to stop.
  for (;;) {
    const m = (await get(svc.port, '/metrics')).body.toString();
    if (/^danqing_renders_in_flight 1$/m.test(m)) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  svc.child.kill('SIGTERM');
  const res = await inFlight;
  assert.strictEqual(res.status, 200, 'the accepted render finishes: ' + res.body.toString().slice(0, 200));
  assert.strictEqual(res.headers['content-type'], 'image/jpeg', 'format=auto answers JPEG');
  const { code } = await svc.exited;
  assert.strictEqual(code, 0, 'exit 0 after a clean drain');

  // A drain that runs out of time: --drain-timeout bounds it (each accepted
  // inscription is answered, by its image or by a 503 that says it was cut
  // off), and the exit code tells which happened (before: the process waited
  // for every render, answered them all 200, then exited 1 all the same).
  const short =
      await startServe(binary, ['--workers', '1', '--drain-timeout', '1', '--drain-delay', '0']);
  const posts = [];
  for (let i = 0; i < 3; ++i) {
    posts.push(post(short.port, '/v1/inscriptions?width=2048&height=2048', photo, {
      'Content-Type': 'image/jpeg',
      'Content-Length': photo.length,
    }));
  }
  for (;;) {
    const m = (await get(short.port, '/metrics')).body.toString();
    if (/^danqing_renders_in_flight 1$/m.test(m) && /^danqing_render_queue_depth [12]$/m.test(m))
      break;
    await new Promise((r) => setTimeout(r, 20));
  }
  const signalled = Date.now();
  short.child.kill('SIGTERM');
  const answers = await Promise.all(posts);
  const exit = await short.exited;
  const seconds = (Date.now() - signalled) / 1000;
  const statuses = answers.map((a) => a.status);
  for (const a of answers) {
    assert(a.status === 200 || a.status === 503, 'answered: ' + a.status);
    if (a.status === 503)
      assert.match(a.body.toString(), /shut down before this inscription was finished/);
  }
  const cut = statuses.filter((s) => s === 503).length;
  assert.strictEqual(
      exit.code, cut > 0 ? 1 : 0, `exit code tells whether renders were cut off (${statuses})`);
  assert(seconds < 8, `the drain timeout bounds the drain: exited ${seconds} s after SIGTERM`);
  console.log(
      `sigterm_test: drain timeout: answers ${statuses}, exit ${exit.code} after ${seconds} s`);

  // A client still sending its upload at the drain timeout, fast enough for
  // the body pace: its connection is closed then (before: the process waited
  // for the whole upload, minutes at this pace).
  const slow =
      await startServe(binary, ['--workers', '1', '--drain-timeout', '1', '--drain-delay', '0']);
  const sock = net.connect(slow.port, '127.0.0.1');
  await new Promise((r) => sock.once('connect', r));
  sock.on('error', () => {});
  sock.write(
      'POST /v1/inscriptions HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\n' +
      'Content-Length: 8000000\r\n\r\n');
  const piece = Buffer.alloc(32 * 1024, 0x41);
  sock.write(piece);
  const trickle = setInterval(() => sock.write(piece), 1000);  // 32 KiB/s
  await new Promise((r) => setTimeout(r, 1500));
  const slowSignalled = Date.now();
  slow.child.kill('SIGTERM');
  const cap = setTimeout(() => clearInterval(trickle), 20000);
  const slowExit = await slow.exited;
  const slowSeconds = (Date.now() - slowSignalled) / 1000;
  clearInterval(trickle);
  clearTimeout(cap);
  sock.destroy();
  assert.strictEqual(slowExit.code, 0, 'nothing accepted was cut off');
  assert(
      slowSeconds < 6,
      `a trickled upload cannot hold the stop: exited ${slowSeconds} s after SIGTERM`);
  assert.match(slow.log(), /1 connection\(s\) still open at the drain timeout closed/);
  console.log(`sigterm_test: trickled upload: exit ${slowExit.code} after ${slowSeconds} s`);
  console.log('sigterm_test: PASS');
}

main().catch((e) => {
  console.error('sigterm_test: FAIL', e);
  process.exit(1);
});
