// Independent GPT-2 token references for test_prepare.sh, from npm packages installed into
// data/cache/node_modules by scripts/install_deps.sh. Writes llm.c token shards (EOT before each
// document), so the test compares them with data/prepare's output byte for byte.
//   node reference_tokenizer.cjs tiktoken OUT.bin FILE...   js-tiktoken's "gpt2" encoding of the files
//   node reference_tokenizer.cjs testplans DIR              gpt-tokenizer's data/TestPlans.txt r50k_base
//       cases: DIR/case_NNN.txt (the sample) and DIR/expected.bin (the listed tokens, in case order)
'use strict';
const fs = require('fs');
const path = require('path');
const cache = path.resolve(__dirname, '../../data/cache');
const requireFromCache = require('module').createRequire(path.join(cache, 'package.json'));

const EOT = 50256;

function writeShard(outPath, documents) {
  const count = documents.reduce((n, tokens) => n + 1 + tokens.length, 0);
  const buffer = Buffer.alloc(1024 + 2 * count);
  buffer.writeInt32LE(20240520, 0);
  buffer.writeInt32LE(1, 4);
  buffer.writeInt32LE(count, 8);
  let offset = 1024;
  for (const tokens of documents) {
    for (const token of [EOT, ...tokens]) {
      buffer.writeUInt16LE(token, offset);
      offset += 2;
    }
  }
  fs.writeFileSync(outPath, buffer);
}

const [mode, ...rest] = process.argv.slice(2);
if (mode === 'tiktoken') {
  const [outPath, ...files] = rest;
  const encoding = requireFromCache('js-tiktoken').getEncoding('gpt2');
  writeShard(outPath, files.map((file) => encoding.encode(fs.readFileSync(file, 'utf8'))));
} else if (mode === 'testplans') {
  const [dir] = rest;
  const planPath = path.join(path.dirname(requireFromCache.resolve('gpt-tokenizer/package.json')),
                             'data', 'TestPlans.txt');
  // Blocks separated by a blank line: "EncodingName: X", "Sample: TEXT", "Encoded: [ids]".
  const cases = [];
  for (const block of fs.readFileSync(planPath, 'utf8').split('\n\n')) {
    const [nameLine, sampleLine, encodedLine] = block.split('\n');
    if (!nameLine || !sampleLine || !encodedLine) continue;
    if (nameLine !== 'EncodingName: r50k_base') continue;
    cases.push({
      sample: sampleLine.slice('Sample: '.length),
      tokens: JSON.parse(encodedLine.slice('Encoded: '.length)),
    });
  }
  cases.forEach((c, i) => fs.writeFileSync(path.join(dir, `case_${String(i).padStart(3, '0')}.txt`), c.sample));
  writeShard(path.join(dir, 'expected.bin'), cases.map((c) => c.tokens));
  console.log(cases.length);
} else {
  console.error('usage: node reference_tokenizer.cjs tiktoken OUT.bin FILE... | testplans DIR');
  process.exit(2);
}
