// Helpers for the tests that run the `danqing serve` binary: start it on a
// port of the kernel's choosing, wait until ready, stop with SIGTERM.
'use strict';
const { spawn } = require('child_process');
const http = require('http');

function get(port, path) {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
    }).on('error', reject);
  });
}

function post(port, path, body, headers) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path, method: 'POST', headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

// The server binds a port of the kernel's choosing (--port 0) and logs it
// ("serving on http://127.0.0.1:PORT"); nothing probes for a free port, so no
// other process can take it in between. Its output still reaches ours.
async function startServe(binary, extraArgs = []) {
  const child = spawn(binary, ['serve', '--host', '127.0.0.1', '--port', '0', ...extraArgs], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  let log = '';
  for (const [from, to] of [[child.stdout, process.stdout], [child.stderr, process.stderr]]) {
    from.on('data', (chunk) => {
      log += chunk.toString();
      to.write(chunk);
    });
  }
  let port = 0;
  for (let i = 0; i < 600; i++) {
    if (child.exitCode !== null) throw new Error('danqing serve exited early with ' + child.exitCode);
    const m = port === 0 ? /serving on http:\/\/127\.0\.0\.1:(\d+)/.exec(log) : null;
    if (m) port = Number(m[1]);
    if (port !== 0) {
      try {
        const r = await get(port, '/readyz');
        if (r.status === 200) return {port, child, exited, log: () => log};
      } catch (e) {
        // not answering yet
      }
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill('SIGKILL');
  throw new Error('danqing serve did not become ready' + (port === 0 ? ' (no "serving on" line in its log)' : ''));
}

module.exports = { get, post, startServe };
