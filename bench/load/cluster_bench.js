// 3 replicas x 2 workers behind a round-robin haproxy (testing/cluster), the
// shared Redis queue against per-pod queues: throughput at saturation,
// upload-to-done p50/p99, and the share of other replicas' workers idle at
// the moment one refuses (429).
//   node bench/load/cluster_bench.js build/default/cmd/danqing/danqing [jobs] [clients]
'use strict';
const fs = require('fs');
const path = require('path');
const {get, post, startServe} = require('../../tests/service/serve_process');
const {startRedis, startHaproxy} = require('../../testing/cluster/cluster');

const [binary, jobsArg, clientsArg] = process.argv.slice(2);
const JOBS = Number(jobsArg || 90), CLIENTS = Number(clientsArg || 24);
const photo =
    fs.readFileSync(path.join(__dirname, '..', '..', 'tests', 'data', 'photos', 'coffee.jpg'));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const Q = 'width=640&height=480&style=cao';

async function inFlight(port) {
  try {
    const m =
        /^danqing_renders_in_flight (\d+)/m.exec((await get(port, '/metrics')).body.toString());
    return m ? Number(m[1]) : 0;
  } catch (e) {
    return 0;
  }
}

async function run(shared) {
  const redis = shared ? await startRedis() : null;
  const args = ['--workers', '2', '--queue', '4', '--jobs-per-client', '0'];
  if (shared) args.push('--redis', redis.url);
  const replicas = [];
  for (let i = 0; i < 3; i++) replicas.push(await startServe(binary, args));
  const proxy = await startHaproxy(replicas.map((r) => r.port));
  const busy = replicas.map(() => 0);
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      for (let i = 0; i < replicas.length; i++) busy[i] = await inFlight(replicas[i].port);
      await sleep(20);
    }
  })();
  const latencies = [];
  const idleAtRefusal = [];
  let refused = 0, next = 0;
  const t0 = Date.now();
  async function client() {
    while (next < JOBS) {
      next++;
      const start = Date.now();
      while (true) {
        const r = await post(
            proxy.port, '/v1/inscriptions?' + Q + (shared ? '&wait=20' : ''), photo,
            {'Content-Type': 'image/jpeg'});
        if (r.status === 200) break;
        if (r.status === 202) {  // shared: follow it to the end
          const id = JSON.parse(r.body.toString()).id;
          while (JSON.parse((await get(proxy.port, '/v1/inscriptions/' + id)).body.toString())
                     .state !== 'done')
            await sleep(50);
          break;
        }
        refused++;
        // Workers free anywhere at this moment (6 in all).
        idleAtRefusal.push(busy.reduce((a, b) => a + Math.max(0, 2 - b), 0) / 6);
        await sleep(1000 * Number(r.headers['retry-after'] || 1));
      }
      latencies.push(Date.now() - start);
    }
  }
  await Promise.all(Array.from({length: CLIENTS}, client));
  const secs = (Date.now() - t0) / 1000;
  sampling = false;
  await sampler;
  proxy.stop();
  for (const r of replicas) r.child.kill('SIGKILL');
  if (redis) redis.remove();
  latencies.sort((a, b) => a - b);
  const q = (p) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))];
  const idle =
      idleAtRefusal.length ? idleAtRefusal.reduce((a, b) => a + b, 0) / idleAtRefusal.length : 0;
  console.log(
      `${shared ? 'shared Redis queue' : 'per-pod queues   '}: ${JOBS} jobs, ${CLIENTS} clients: ` +
      `${(JOBS / secs).toFixed(2)} jobs/s, upload-to-done p50 ${q(0.5)} ms p99 ${q(0.99)} ms, ` +
      `${refused} refusals, workers idle at a refusal ${(100 * idle).toFixed(1)} %`);
}

(async () => {
  await run(false);
  await run(true);
  process.exit(0);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
