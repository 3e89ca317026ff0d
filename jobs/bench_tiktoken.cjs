// tiktoken's own core (@dqbd/tiktoken, the Rust crate as WebAssembly) on the files `tptrain
// tokenize` reads in jobs/bench-tokenize.sh: each file one document, encoded as ordinary text.
//
//   node jobs/bench_tiktoken.cjs MODULES ENCODING FILE...
//
// Prints one JSON line: {"encoding", "bytes", "tokens", "cpu_s", "mb_per_cpu_s"}. The CPU time
// (user + system, process.cpuUsage) covers the encoding alone, not loading the ranks, as
// tptrain's figure covers its tokenizing and not its start.
'use strict';
const fs = require('fs');
const path = require('path');

const [modules, encoding, ...files] = process.argv.slice(2);
if (!modules || !encoding || files.length === 0) {
  console.error('usage: node bench_tiktoken.cjs MODULES ENCODING FILE...');
  process.exit(2);
}
const { get_encoding } = require(path.join(modules, '@dqbd', 'tiktoken'));
const enc = get_encoding(encoding);
const texts = files.map((f) => fs.readFileSync(f, 'utf8'));
const bytes = files.reduce((sum, f) => sum + fs.statSync(f).size, 0);
const start = process.cpuUsage();
let tokens = 0;
for (const text of texts) tokens += 1 + enc.encode_ordinary(text).length;  // + the end-of-text token
const used = process.cpuUsage(start);
const cpu = (used.user + used.system) / 1e6;
console.log(JSON.stringify({ encoding, bytes, tokens, cpu_s: cpu, mb_per_cpu_s: bytes / 1e6 / cpu }));
enc.free();
