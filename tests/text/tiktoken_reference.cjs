// Tokens by tiktoken's own core (@dqbd/tiktoken: the Rust crate as WebAssembly, with the regex
// and fancy-regex crates), the independent implementation tptrain's tokenizers must equal.
//
//   node tiktoken_reference.cjs MODULES ENCODING CORPUS        one JSON line per case on stdout:
//        {"name": ..., "text": ..., "special": bool, "tokens": [...]}
//   node tiktoken_reference.cjs MODULES ENCODING CORPUS SHARD  checks an llm.c shard written by
//        `tptrain tokenize CORPUS --tokenizer ENCODING`: the end-of-text token followed by CORPUS
//        encoded as ordinary text, uint16 (version 1) for gpt2, uint32 (version 2) above 65,536 ids
//
// MODULES is the node_modules folder holding @dqbd/tiktoken (tests/text/setup-js-tiktoken.sh);
// ENCODING is gpt2, cl100k_base or o200k_base. The cases: the corpus whole (special tokens
// allowed, and as ordinary text), every line of it, edge cases (contractions in both cases,
// digit runs, CRLF runs, emoji ZWJ sequences, CamelCase, every special token), and random strings
// drawn, with a fixed seed, from pools of many scripts, white space of every kind (U+0085,
// U+180E, U+FEFF included: tiktoken's \s is White_Space, as tptrain's), marks and emoji.
'use strict';
const fs = require('fs');
const path = require('path');

const [modules, encoding, corpusPath, shardPath] = process.argv.slice(2);
if (!modules || !encoding || !corpusPath) {
  console.error('usage: node tiktoken_reference.cjs MODULES ENCODING CORPUS [SHARD]');
  process.exit(2);
}
const { get_encoding } = require(path.join(modules, '@dqbd', 'tiktoken'));
const enc = get_encoding(encoding);
const corpus = fs.readFileSync(corpusPath, 'utf8');
const ordinary = (text) => Array.from(enc.encode_ordinary(text));
const endOfText = { gpt2: 50256, cl100k_base: 100257, o200k_base: 199999 }[encoding];
const specials = {
  gpt2: ['<|endoftext|>'],
  cl100k_base: ['<|endoftext|>', '<|fim_prefix|>', '<|fim_middle|>', '<|fim_suffix|>', '<|endofprompt|>'],
  o200k_base: ['<|endoftext|>', '<|endofprompt|>'],
}[encoding];

if (shardPath) {
  const bytes = fs.readFileSync(shardPath);
  const header = (i) => bytes.readInt32LE(4 * i);
  const expected = [endOfText, ...ordinary(corpus)];
  const version = encoding === 'gpt2' ? 1 : 2;
  const width = 2 * version;
  const problems = [];
  if (header(0) !== 20240520 || header(1) !== version) problems.push(`header magic ${header(0)} version ${header(1)}, expected version ${version}`);
  if (header(2) !== expected.length) problems.push(`header says ${header(2)} tokens, tiktoken gives ${expected.length}`);
  if (bytes.length !== 1024 + width * expected.length) problems.push(`file is ${bytes.length} bytes`);
  for (let i = 0; i < expected.length && 1024 + width * (i + 1) <= bytes.length; ++i) {
    const got = version === 1 ? bytes.readUInt16LE(1024 + 2 * i) : bytes.readUInt32LE(1024 + 4 * i);
    if (got !== expected[i]) {
      problems.push(`token ${i}: shard ${got}, tiktoken ${expected[i]}`);
      break;
    }
  }
  if (problems.length) {
    console.error(`${shardPath}: ${problems.join('; ')}`);
    process.exit(1);
  }
  console.log(`${shardPath}: ${expected.length} tokens (${encoding}), equal to tiktoken's`);
  process.exit(0);
}

const out = [];
const add = (name, text, special) =>
  out.push(JSON.stringify({ name, text, special, tokens: special ? Array.from(enc.encode(text, 'all')) : ordinary(text) }));

add('corpus (special tokens)', corpus, true);
add('corpus (ordinary text)', corpus, false);
corpus.split(/(?<=\n)/).forEach((line, i) => add(`corpus line ${i + 1}`, line, false));
const edges = ['', ' ', '\n', '\n\n', ' \n', '\t', "'s", "'S", "  'll", "a'b", "x's", '   a', '\t\t\n  \n', ' '.repeat(300),
  ' '.repeat(300) + 'a', 'a'.repeat(2000), '1'.repeat(500), '😀'.repeat(100), '\n'.repeat(50) + 'x',
  'a<|endoftext|>b', '<|endoftext|><|endoftext|>', '<|endoftext', 'endoftext|>', '<|<|endoftext|>|>', ' ½', '٣٤٥',
  'e\u0301\u0301', '\u00a0\u00a0a', '\u3000', 'x\u2028y', '\r\n\r\n', '...', ' !!!', '中', '😀', 'é',
  // contractions in both cases, and (?i)'s Unicode case folding (U+017F long s, U+212A Kelvin)
  "don't DON'T Don'T we'll WE'LL they're THEY'RE I've I'VE I'm I'M he'd HE'D it's IT'S", "'ſ 'K 'ſt", "'RE'Ve'LL",
  // digits: \p{N}{1,3} cuts runs in threes; other numerals
  '1234567890', '3.14159 2,718,281', '٠١٢٣٤٥٦٧٨٩', '१२३४५', '½⅓¼⅔', '²³¹⁴', 'x1y22z333w4444',
  // CRLF runs and mixed line breaks
  'a\r\nb\r\n\r\nc', ' \r\n \r\n', '\r\r\n\n\r', 'line\r\n\r\n\r\n\r\nnext', '!!\r\n', '  \r\n\t\r\n',
  // emoji ZWJ sequences, skin tones, flags, keycaps
  '👨‍👩‍👧‍👦', '🏳️‍🌈', '👩🏽‍💻 and 🧑‍🤝‍🧑', '🇯🇵🇫🇷', '1️⃣#️⃣', '❤️‍🔥',
  // CamelCase and slashes (o200k's pattern), multi-script text
  'CamelCaseString HTTPServer getHTTPResponseCode iPhone', 'path/to/file.txt //comment /* c */ a/b',
  'Ελληνικά русский язык עברית العربية हिन्दी ไทย 한국어 日本語のテキスト 中文', 'naïve café Ærø straße ǅemal',
  '\u0085\u180e\ufeff\u200b', 'tab\there\u000bvt\u000cff'];
for (const s of specials) edges.push(s, `x${s}y`, ` ${s} `);
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
  'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ', '0123456789', '        ', '\n\n\n\t\r', '\r\n\r\n', "''''sStTrRevmldſ",
  '.,;:!?-()[]{}"/\\@#$%^&*_+=<>|~`', 'éèêëàâäîïôöùûüçñßøåæœÉÀÇŁłŃǅ', '中文字词语北京東京한국어ひらがなカタカナ', 'ПриветмирΓειάσουمرحباשלוםनमस्तेสวัสดี',
  '٣٤٥½¾²١٢३४', '\u00a0\u3000\u2002\u2028\u1680\u200b\u0301\u0085\u180e\ufeff\u000b\u000c', '😀🎉👍🏽👨‍👩‍👧🇫🇷❤️🏳️‍🌈',
];
const graphemes = pools.map((p) => Array.from(p));
for (let i = 0; i < 500; ++i) {
  const length = Math.floor(random() * 120);
  let text = '';
  for (let k = 0; k < length; ++k) {
    const pool = graphemes[Math.floor(random() * graphemes.length)];
    text += pool[Math.floor(random() * pool.length)];
  }
  if (random() < 0.2) text += specials[Math.floor(random() * specials.length)] + Array.from(text).slice(0, 20).join('');
  add(`random ${i}`, text, random() < 0.5);
}
process.stdout.write(out.join('\n') + '\n');
enc.free();
