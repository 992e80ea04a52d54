#!/usr/bin/env node
// Builds data/verse/poems.tsv, the themed verse corpus the Danqing service
// chooses from, out of chinese-poetry@2.0.1 (MIT; the poems are public domain).
//
//   cd tools/verse && npm ci && node build.js
//
// Steps:
//  1. Read the Tang poems (quantangshi/poet.tang.*.json and 唐诗三百首.json).
//  2. Keep regular short forms: 4 or 8 lines (jueju, lüshi) of 5 or 7 characters
//     per line, no editorial marks (□, brackets, notes).
//  3. Convert traditional -> simplified with Debian's `opencc` CLI (config
//     t2s.json), all text in one batch.
//  4. Keep only poems whose every character has stroke data: the set of
//     characters is the file names of node_modules/hanzi-writer-data/*.json
//     (the renderer's stroke source).
//  5. Tag themes from imagery keywords (THEMES below; the same names the
//     perceiver scores).
//  6. Order: 唐诗三百首 first, then by popularity (rank/poet, Baidu hit count),
//     keep the first MAX_POEMS that carry at least one theme.
//  7. Write data/verse/poems.tsv: one poem per line,
//     id \t title \t author \t themes (comma list) \t lines joined by '|'.
//
//   node build.js --retag
// re-tags the committed poems.tsv in place (step 5 only: same poems, same
// order, themes recomputed), for a change to THEMES without the npm package.
'use strict';

const fs = require('fs');
const path = require('path');
const os = require('os');
const { execFileSync } = require('child_process');

const ROOT = path.resolve(__dirname, '..', '..');
const POETRY = path.join(__dirname, 'node_modules', 'chinese-poetry', 'dist');
const STROKES = path.join(ROOT, 'node_modules', 'hanzi-writer-data');
const OUT = path.join(ROOT, 'data', 'verse', 'poems.tsv');
const MAX_POEMS = 4000;

// Theme -> imagery keywords (simplified). A poem gets a theme when one of its
// keywords occurs; the theme list is ordered by the number of hits.
const THEMES = {
  '山水': ['山', '峰', '岭', '岩', '峦', '崖', '壑', '嶂', '峡', '青山', '云山'],
  '江河湖海': ['江', '河', '湖', '海', '波', '浪', '舟', '帆', '渡', '溪', '泉', '潮', '滩', '洲', '浦'],
  '月夜': ['月', '夜', '宵', '星', '烛', '灯', '银河', '河汉', '婵娟', '更深'],
  '雪': ['雪', '冰', '霰', '琼瑶'],
  '春': ['春', '桃', '柳', '杏', '莺', '燕', '东风', '清明'],
  '夏': ['夏', '荷', '莲', '蝉', '暑', '炎', '薰风', '蛙'],
  '秋': ['秋', '枫', '菊', '雁', '落叶', '霜', '蟋蟀', '梧桐'],
  '冬': ['冬', '寒', '腊', '朔风', '岁暮', '岁晚', '冰'],
  '花': ['花', '梅', '桃', '菊', '荷', '莲', '兰', '牡丹', '芳', '蕊', '英'],
  '人物': ['故人', '美人', '佳人', '君', '友', '客', '翁', '童', '儿', '女', '郎', '妾', '将军', '少年'],
  '城市': ['城', '楼', '宫', '街', '市', '长安', '洛阳', '阙', '台', '巷', '都', '殿'],
  '田园': ['田', '园', '村', '桑', '麻', '农', '耕', '稻', '麦', '篱', '牧', '犁', '锄', '鸡', '犬'],
  '日出日落': ['夕阳', '落日', '斜阳', '残阳', '夕照', '晚照', '日暮', '朝阳', '旭日', '晓', '霞', '日出', '日落', '黄昏'],
  '天空': ['云', '天', '长空', '碧空', '青冥', '飞鸟', '鸿', '鹤', '风'],
  '禽兽': ['猫', '犬', '马', '鹿', '鸟', '雁', '鹤', '鱼', '莺', '燕', '猿', '虎', '牛'],
  '茶酒': ['茶', '酒', '杯', '觞', '醉', '饮', '樽', '壶', '茗'],
  '远行': ['行', '征', '归', '远', '客', '路', '关', '边', '塞', '驿'],
  // Added for the photo cues of issue 29 (grass low in the frame, water drops,
  // a dark storm sky); appended so the older themes keep their order.
  '草': ['草', '苔', '萋', '芜', '茵', '蒿'],
  '雨露': ['雨', '露', '霖', '霏', '滴', '湿'],
  '风雨': ['风雨', '雷', '狂风', '惊风', '阴云', '暴雨', '骤雨', '急雨', '电', '霹雳'],
};

const PUNCT = new Set(['，', '。', '？', '！', '、', '；', '：']);

function readJson(file) {
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

function loadStrokeChars() {
  const chars = new Set();
  for (const f of fs.readdirSync(STROKES)) {
    if (!f.endsWith('.json')) continue;
    const name = f.slice(0, -5);
    if ([...name].length === 1) chars.add(name);
  }
  return chars;
}

// Splits "A，B。" paragraphs into lines and checks the regular form.
function regularLines(paragraphs) {
  if (!Array.isArray(paragraphs)) return null;
  const text = paragraphs.join('');
  if (/[\[\]（）()《》〈〉□{}「」『』“”"0-9a-zA-Z\s]/.test(text)) return null;
  const lines = text.split(/(?<=[，。？！；])/).filter((l) => l.length > 0);
  if (lines.length !== 4 && lines.length !== 8) return null;
  const bodies = lines.map((l) => [...l].filter((c) => !PUNCT.has(c)));
  const n = bodies[0].length;
  if (n !== 5 && n !== 7) return null;
  if (!bodies.every((b) => b.length === n)) return null;
  if (!lines.every((l) => PUNCT.has([...l].pop()))) return null;
  return lines;
}

function loadRanks() {
  const ranks = new Map();
  const dir = path.join(POETRY, 'rank', 'poet');
  for (const f of fs.readdirSync(dir)) {
    if (!f.startsWith('poet.tang.')) continue;
    for (const r of readJson(path.join(dir, f))) {
      ranks.set(r.author + '\u0000' + r.title, r.baidu || 0);
    }
  }
  return ranks;
}

function loadCandidates() {
  const dir = path.join(POETRY, 'quantangshi');
  const famous = readJson(path.join(dir, '唐诗三百首.json'));
  const ranks = loadRanks();
  const seen = new Set();
  const out = [];
  const add = (p, priority) => {
    const lines = regularLines(p.paragraphs);
    if (!lines || !p.title || !p.author) return;
    const key = p.author + '\u0000' + lines.join('');
    if (seen.has(key)) return;
    seen.add(key);
    const rank = ranks.get(p.author + '\u0000' + p.title) || 0;
    out.push({ title: p.title, author: p.author, lines, priority, rank });
  };
  for (const p of famous) add(p, 1);
  const files = fs.readdirSync(dir).filter((f) => /^poet\.tang\.\d+\.json$/.test(f)).sort();
  for (const f of files) for (const p of readJson(path.join(dir, f))) add(p, 0);
  return out;
}

// One opencc call for every string: lines in, lines out.
function toSimplified(strings) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'danqing-verse-'));
  const inFile = path.join(tmp, 'in.txt');
  const outFile = path.join(tmp, 'out.txt');
  fs.writeFileSync(inFile, strings.join('\n') + '\n');
  execFileSync('opencc', ['-c', 't2s.json', '-i', inFile, '-o', outFile]);
  const converted = fs.readFileSync(outFile, 'utf8').split('\n');
  fs.rmSync(tmp, { recursive: true });
  if (converted.length < strings.length) throw new Error('opencc returned fewer lines');
  return converted.slice(0, strings.length);
}

function tagThemes(text) {
  const hits = [];
  for (const [theme, words] of Object.entries(THEMES)) {
    let n = 0;
    for (const w of words) {
      let i = text.indexOf(w);
      while (i >= 0) {
        n++;
        i = text.indexOf(w, i + w.length);
      }
    }
    if (n > 0) hits.push([theme, n]);
  }
  hits.sort((a, b) => b[1] - a[1]);
  return hits.map((h) => h[0]);
}

function main() {
  const strokeChars = loadStrokeChars();
  const candidates = loadCandidates();
  // Flatten: title, author, then each line, per poem.
  const flat = [];
  for (const c of candidates) flat.push(c.title, c.author, ...c.lines);
  const simp = toSimplified(flat);
  let k = 0;
  for (const c of candidates) {
    c.title = simp[k++];
    c.author = simp[k++];
    c.lines = c.lines.map(() => simp[k++]);
  }
  const renderable = (s) => [...s].every((ch) => PUNCT.has(ch) || strokeChars.has(ch));
  const kept = candidates.filter(
    (c) => renderable(c.lines.join('')) && renderable(c.title) && renderable(c.author) &&
      [...c.title].length <= 12);
  kept.sort((a, b) => b.priority - a.priority || b.rank - a.rank);
  const rows = [];
  for (const c of kept) {
    const themes = tagThemes(c.title + c.lines.join(''));
    if (themes.length === 0) continue;
    rows.push([rows.length + 1, c.title, c.author, themes.join(','), c.lines.join('|')].join('\t'));
    if (rows.length >= MAX_POEMS) break;
  }
  const header = [
    '# Danqing verse corpus: Tang poems from chinese-poetry@2.0.1 (MIT, see LICENSE.chinese-poetry),',
    '# simplified with opencc t2s, every character in hanzi-writer-data. Built by tools/verse/build.js.',
    '# id\ttitle\tauthor\tthemes\tlines (| between lines)',
  ];
  fs.mkdirSync(path.dirname(OUT), { recursive: true });
  fs.writeFileSync(OUT, header.join('\n') + '\n' + rows.join('\n') + '\n');
  console.log(`candidates ${candidates.length}, renderable ${kept.length}, written ${rows.length} -> ${OUT}`);
}

// Step 5 alone over the committed corpus: the themes column recomputed.
function retag() {
  const out = fs.readFileSync(OUT, 'utf8').split('\n').map((line) => {
    if (line === '' || line.startsWith('#')) return line;
    const f = line.split('\t');
    if (f.length !== 5) throw new Error(`malformed line: ${line}`);
    const themes = tagThemes(f[1] + f[4].split('|').join(''));
    if (themes.length === 0) throw new Error(`no theme for poem ${f[0]}`);
    f[3] = themes.join(',');
    return f.join('\t');
  });
  fs.writeFileSync(OUT, out.join('\n'));
  console.log(`retagged ${OUT}`);
}

if (process.argv.includes('--retag')) retag();
else main();
