// Helpers for the tests that run the `danqing serve` binary: a free port,
// start, wait until ready, stop with SIGTERM.
'use strict';
const { spawn } = require('child_process');
const http = require('http');
const net = require('net');

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

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

// The port is free when probed, but another process may bind it before the
// child does; the child then exits, and this starts it again on another port
// (three attempts in all).
async function startServe(binary, extraArgs = []) {
  let lastExit = null;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const child = spawn(binary, ['serve', '--host', '127.0.0.1', '--port', String(port), ...extraArgs], {
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
    for (let i = 0; i < 600 && child.exitCode === null; i++) {
      try {
        const r = await get(port, '/readyz');
        if (r.status === 200) return { port, child, exited };
      } catch (e) {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    if (child.exitCode === null) {
      child.kill('SIGKILL');
      throw new Error('danqing serve did not become ready');
    }
    lastExit = child.exitCode;
    console.error(`danqing serve exited early with ${lastExit} (attempt ${attempt + 1}, port ${port})`);
  }
  throw new Error('danqing serve exited early with ' + lastExit + ', three times');
}

module.exports = { freePort, get, post, startServe };
