// Start-up of the multi-replica set-up for tests and benchmarks, on loopback:
// a real redis-server (start-redis.sh: AOF, fsync always, a temporary
// directory) and a round-robin haproxy in front of `danqing serve` processes.
'use strict';
const {spawn, execFileSync} = require('child_process');
const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');

// A port free now (bound by the kernel's choice, then released).
function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const {port} = s.address();
      s.close(() => resolve(port));
    });
  });
}

class Redis {
  constructor(dir, port) {
    this.dir = dir;
    this.port = port;
    this.url = `redis://127.0.0.1:${port}`;
  }
  start() {
    execFileSync(
        path.join(__dirname, 'start-redis.sh'), [this.dir, String(this.port)], {stdio: 'inherit'});
  }
  // SIGKILL, as a crash: only what the AOF holds survives.
  kill() {
    let pid = 0;
    try {
      pid = Number(fs.readFileSync(path.join(this.dir, 'redis.pid'), 'utf8'));
    } catch (e) {
      return;
    }
    try {
      process.kill(pid, 'SIGKILL');
    } catch (e) {
      return;
    }
    for (let i = 0; i < 400; i++) {
      try {
        process.kill(pid, 0);
      } catch (e) {
        break;
      }
      execFileSync('sleep', ['0.01']);
    }
    fs.rmSync(path.join(this.dir, 'redis.pid'), {force: true});
  }
  cli(...args) {
    return execFileSync('redis-cli', ['-h', '127.0.0.1', '-p', String(this.port), ...args])
        .toString();
  }
  remove() {
    this.kill();
    fs.rmSync(this.dir, {recursive: true, force: true});
  }
}

async function startRedis() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dq-redis-'));
  const r = new Redis(dir, await freePort());
  r.start();
  return r;
}

// haproxy, round robin over `backends` (ports on 127.0.0.1), each checked on
// /readyz; a request that cannot reach a replica is sent to another.
async function startHaproxy(backends) {
  const haproxy = ['/usr/sbin/haproxy', '/usr/bin/haproxy'].find((p) => fs.existsSync(p));
  if (!haproxy) throw new Error('haproxy not found (scripts/setup.sh installs it)');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dq-haproxy-'));
  const port = await freePort();
  const cfg = [
    'global',
    '  maxconn 4096',
    'defaults',
    '  mode http',
    '  timeout connect 2s',
    '  timeout client 60s',
    '  timeout server 60s',
    '  option forwardfor',
    '  option redispatch',
    '  retries 3',
    'frontend fe',
    `  bind 127.0.0.1:${port}`,
    '  default_backend be',
    'backend be',
    '  balance roundrobin',
    '  option httpchk GET /readyz',
    ...backends.map((p, i) => `  server s${i} 127.0.0.1:${p} check inter 300ms fall 1 rise 1`),
    '',
  ].join('\n');
  fs.writeFileSync(path.join(dir, 'haproxy.cfg'), cfg);
  const child = spawn(
      haproxy, ['-f', path.join(dir, 'haproxy.cfg'), '-db'], {stdio: ['ignore', 'ignore', 'pipe']});
  let log = '';
  child.stderr.on('data', (c) => (log += c.toString()));
  for (let i = 0; i < 100; i++) {
    if (child.exitCode !== null) throw new Error('haproxy exited: ' + log);
    const up = await new Promise((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
    if (up)
      return {
        port,
        child,
        stop: () => {
          child.kill('SIGKILL');
          fs.rmSync(dir, {recursive: true, force: true});
        }
      };
    await new Promise((r) => setTimeout(r, 50));
  }
  child.kill('SIGKILL');
  throw new Error('haproxy did not listen: ' + log);
}

module.exports = {
  freePort,
  startRedis,
  startHaproxy
};
