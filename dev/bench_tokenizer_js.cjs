// js-tiktoken's side of dev/bench_tokenizer: encodes FILE with the "gpt2" encoding REPEATS times after
// one warm-up run and prints "TOKENS MEDIAN_SECONDS" on one line. Run by the benchmark, not by hand.
'use strict';
const fs = require('fs');
const path = require('path');
const requireFromCache = require('module').createRequire(
  path.resolve(__dirname, '../data/cache/package.json'));
const encoding = requireFromCache('js-tiktoken').getEncoding('gpt2');
const [file, repeats] = [process.argv[2], Number(process.argv[3] || 3)];
const text = fs.readFileSync(file, 'utf8');
let tokens = encoding.encode(text).length;  // warm-up: JIT compilation of the encoder
const seconds = [];
for (let i = 0; i < repeats; i++) {
  const start = process.hrtime.bigint();
  tokens = encoding.encode(text).length;
  seconds.push(Number(process.hrtime.bigint() - start) / 1e9);
}
seconds.sort((a, b) => a - b);
console.log(tokens, seconds[Math.floor(seconds.length / 2)]);
