#!/usr/bin/env node
// Builds data/strokes.bin from hanzi-writer-data: per character, each stroke's
// median polyline (writing order) with the stroke's half-width at every median
// point, measured from the stroke's own outline. Coordinates stay in
// hanzi-writer's 1024 box (y up; screen_y = 900 - y), quantized to int16.
//
// Usage: node build_strokes.js <hanzi-writer-data dir> <out strokes.bin>
//
// File layout (little endian), read by src/render/stroke_data.cc:
//   char[8]  magic "DQSTRK01"
//   u32      character count N
//   u32      reserved (0)
//   N x { u32 codepoint; u32 offset }   sorted by codepoint; offset from file start
//   records: u8 strokes; per stroke: u8 points; per point: i16 x, i16 y, u8 half_width
'use strict';
const fs = require('fs');
const path = require('path');

function tokenize(d) {
  return d.match(/[MLQCZmlqcz]|-?\d*\.?\d+(?:e-?\d+)?/g) || [];
}

// Flattens an SVG path of M/L/Q/C/Z (absolute, as hanzi-writer writes them)
// into a list of closed polylines.
function flatten(d) {
  const t = tokenize(d);
  const polys = [];
  let cur = null;
  let x = 0, y = 0;
  let i = 0;
  const num = () => parseFloat(t[i++]);
  while (i < t.length) {
    const op = t[i++];
    if (op === 'M') {
      x = num(); y = num();
      cur = [[x, y]];
      polys.push(cur);
    } else if (op === 'L') {
      x = num(); y = num();
      cur.push([x, y]);
    } else if (op === 'Q') {
      const cx = num(), cy = num(), ex = num(), ey = num();
      for (let k = 1; k <= 6; ++k) {
        const s = k / 6, u = 1 - s;
        cur.push([u * u * x + 2 * u * s * cx + s * s * ex, u * u * y + 2 * u * s * cy + s * s * ey]);
      }
      x = ex; y = ey;
    } else if (op === 'C') {
      const c1x = num(), c1y = num(), c2x = num(), c2y = num(), ex = num(), ey = num();
      for (let k = 1; k <= 8; ++k) {
        const s = k / 8, u = 1 - s;
        cur.push([u * u * u * x + 3 * u * u * s * c1x + 3 * u * s * s * c2x + s * s * s * ex,
                  u * u * u * y + 3 * u * u * s * c1y + 3 * u * s * s * c2y + s * s * s * ey]);
      }
      x = ex; y = ey;
    } else if (op === 'Z' || op === 'z') {
      // closed implicitly
    } else {
      throw new Error('unsupported path op ' + op);
    }
  }
  return polys;
}

function segDist(px, py, ax, ay, bx, by) {
  const dx = bx - ax, dy = by - ay;
  const l2 = dx * dx + dy * dy;
  let s = l2 > 0 ? ((px - ax) * dx + (py - ay) * dy) / l2 : 0;
  s = Math.max(0, Math.min(1, s));
  const qx = ax + s * dx - px, qy = ay + s * dy - py;
  return Math.sqrt(qx * qx + qy * qy);
}

function inside(px, py, polys) {
  let c = false;
  for (const p of polys) {
    for (let a = 0, b = p.length - 1; a < p.length; b = a++) {
      const [ax, ay] = p[a], [bx, by] = p[b];
      if ((ay > py) !== (by > py) && px < ((bx - ax) * (py - ay)) / (by - ay) + ax) c = !c;
    }
  }
  return c;
}

function halfWidth(px, py, polys) {
  let best = Infinity;
  for (const p of polys) {
    for (let a = 0, b = p.length - 1; a < p.length; b = a++) {
      best = Math.min(best, segDist(px, py, p[a][0], p[a][1], p[b][0], p[b][1]));
    }
  }
  if (!inside(px, py, polys)) return 0;
  return Math.min(255, Math.round(best));
}

function main() {
  const [srcDir, outFile] = process.argv.slice(2);
  if (!srcDir || !outFile) {
    console.error('usage: build_strokes.js <hanzi-writer-data dir> <out strokes.bin>');
    process.exit(2);
  }
  const files = fs.readdirSync(srcDir).filter((f) => f.endsWith('.json') && f !== 'package.json');
  const entries = [];
  for (const f of files) {
    const ch = f.slice(0, -5);
    const cps = Array.from(ch);
    if (cps.length !== 1) continue;
    const cp = cps[0].codePointAt(0);
    const j = JSON.parse(fs.readFileSync(path.join(srcDir, f), 'utf8'));
    if (!Array.isArray(j.strokes) || !Array.isArray(j.medians) || j.strokes.length !== j.medians.length) continue;
    if (j.strokes.length === 0 || j.strokes.length > 255) continue;
    const parts = [Buffer.from([j.strokes.length])];
    for (let s = 0; s < j.strokes.length; ++s) {
      const polys = flatten(j.strokes[s]);
      const med = j.medians[s].slice(0, 255);
      const b = Buffer.alloc(1 + med.length * 5);
      b.writeUInt8(med.length, 0);
      med.forEach(([mx, my], k) => {
        b.writeInt16LE(Math.round(mx), 1 + k * 5);
        b.writeInt16LE(Math.round(my), 3 + k * 5);
        b.writeUInt8(halfWidth(mx, my, polys), 5 + k * 5);
      });
      parts.push(b);
    }
    entries.push({ cp, data: Buffer.concat(parts) });
  }
  entries.sort((a, b) => a.cp - b.cp);
  const head = Buffer.alloc(16 + entries.length * 8);
  head.write('DQSTRK01', 0, 'latin1');
  head.writeUInt32LE(entries.length, 8);
  head.writeUInt32LE(0, 12);
  let off = head.length;
  entries.forEach((e, k) => {
    head.writeUInt32LE(e.cp, 16 + k * 8);
    head.writeUInt32LE(off, 20 + k * 8);
    off += e.data.length;
  });
  fs.mkdirSync(path.dirname(outFile), { recursive: true });
  const tmp = outFile + '.tmp';
  fs.writeFileSync(tmp, Buffer.concat([head, ...entries.map((e) => e.data)]));
  fs.renameSync(tmp, outFile);
  console.log(`strokes.bin: ${entries.length} characters, ${off} bytes`);
}

main();
