// GPT-2 tokens by js-tiktoken, the independent implementation tptrain's tokenizer must equal.
//
//   node tiktoken_reference.cjs MODULES CORPUS             one JSON line per case on stdout:
//        {"name": ..., "text": ..., "special": bool, "tokens": [...]}
//   node tiktoken_reference.cjs MODULES CORPUS SHARD       checks an llm.c shard written by
//        `tptrain tokenize CORPUS`: <|endoftext|> followed by CORPUS encoded as ordinary text
//
// MODULES is the node_modules folder holding js-tiktoken (tests/text/setup-js-tiktoken.sh).
// The cases: the corpus whole (with <|endoftext|> as the special token, and as ordinary text),
// every line of it, edge cases, and random strings drawn, with a fixed seed, from characters on
// which JavaScript's \s and Unicode's White_Space agree (js-tiktoken runs the pattern as a
// JavaScript RegExp, whose \s also takes U+FEFF and not U+0085; tiktoken and tptrain use
// White_Space).
'use strict';
const fs = require('fs');
const path = require('path');

const [modules, corpusPath, shardPath] = process.argv.slice(2);
if (!modules || !corpusPath) {
  console.error('usage: node tiktoken_reference.cjs MODULES CORPUS [SHARD]');
  process.exit(2);
}
const { getEncoding } = require(path.join(modules, 'js-tiktoken'));
const enc = getEncoding('gpt2');
const corpus = fs.readFileSync(corpusPath, 'utf8');
const ordinary = (text) => enc.encode(text, [], []);

if (shardPath) {
  const bytes = fs.readFileSync(shardPath);
  const header = (i) => bytes.readInt32LE(4 * i);
  const expected = [50256, ...ordinary(corpus)];
  const problems = [];
  if (header(0) !== 20240520 || header(1) !== 1) problems.push(`header magic ${header(0)} version ${header(1)}`);
  if (header(2) !== expected.length) problems.push(`header says ${header(2)} tokens, js-tiktoken gives ${expected.length}`);
  if (bytes.length !== 1024 + 2 * expected.length) problems.push(`file is ${bytes.length} bytes`);
  for (let i = 0; i < expected.length && 1024 + 2 * i + 1 < bytes.length; ++i) {
    const got = bytes.readUInt16LE(1024 + 2 * i);
    if (got !== expected[i]) {
      problems.push(`token ${i}: shard ${got}, js-tiktoken ${expected[i]}`);
      break;
    }
  }
  if (problems.length) {
    console.error(`${shardPath}: ${problems.join('; ')}`);
    process.exit(1);
  }
  console.log(`${shardPath}: ${expected.length} tokens, equal to js-tiktoken's`);
  process.exit(0);
}

const out = [];
const add = (name, text, special) =>
  out.push(JSON.stringify({ name, text, special, tokens: special ? enc.encode(text, 'all') : ordinary(text) }));

add('corpus (<|endoftext|> special)', corpus, true);
add('corpus (ordinary text)', corpus, false);
corpus.split(/(?<=\n)/).forEach((line, i) => add(`corpus line ${i + 1}`, line, false));
const edges = ['', ' ', '\n', '\n\n', ' \n', '\t', "'s", "'S", "  'll", "a'b", "x's", '   a', '\t\t\n  \n', ' '.repeat(300),
  ' '.repeat(300) + 'a', 'a'.repeat(2000), '1'.repeat(500), '😀'.repeat(100), '\n'.repeat(50) + 'x', '<|endoftext|>',
  'a<|endoftext|>b', '<|endoftext|><|endoftext|>', '<|endoftext', 'endoftext|>', ' ½', '٣٤٥', 'e\u0301\u0301',
  '\u00a0\u00a0a', '\u3000', 'x\u2028y', '\r\n\r\n', '...', ' !!!', '中', '😀', 'é'];
edges.forEach((text, i) => { add(`edge ${i}`, text, false); add(`edge ${i} (special)`, text, true); });

// mulberry32: a small seeded generator, so the cases are the same on every run.
let seed = 20240520;
const random = () => {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pools = [
  'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ', '0123456789', '        ', '\n\n\n\t\r', "''''sStTrRevmld",
  '.,;:!?-()[]{}"/\\@#$%^&*_+=<>|~`', 'éèêëàâäîïôöùûüçñßøåæœÉÀÇŁłŃ', '中文字词语北京東京한국어', 'ПриветмирΓειάσουمرحبا',
  '٣٤٥½¾²', '\u00a0\u3000\u2002\u2028\u1680\u200b\u0301', '😀🎉👍🏽👨‍👩‍👧🇫🇷❤️',
];
const graphemes = pools.map((p) => Array.from(p));
for (let i = 0; i < 400; ++i) {
  const length = Math.floor(random() * 120);
  let text = '';
  for (let k = 0; k < length; ++k) {
    const pool = graphemes[Math.floor(random() * graphemes.length)];
    text += pool[Math.floor(random() * pool.length)];
  }
  if (random() < 0.2) text += '<|endoftext|>' + Array.from(text).slice(0, 20).join(''); // whole code points
  add(`random ${i}`, text, random() < 0.5);
}
process.stdout.write(out.join('\n') + '\n');
