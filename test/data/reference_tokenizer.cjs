// Independent GPT-2 and Llama 3 token references for test_prepare.sh, from npm packages installed
// into data/cache/node_modules by scripts/install_deps.sh. Writes llm.c token shards (the
// document-start token before each document), so the test compares them with data/prepare's output
// byte for byte.
//   node reference_tokenizer.cjs tiktoken OUT.bin FILE...   js-tiktoken's "gpt2" encoding of the files
//   node reference_tokenizer.cjs llama3 OUT.bin FILE...     llama3-tokenizer-js's encoding of the files
//       as ordinary text (special-token names in them are characters), in a Llama 3 shard
//   node reference_tokenizer.cjs testplans DIR              gpt-tokenizer's data/TestPlans.txt r50k_base
//       cases: DIR/case_NNN.txt (the sample) and DIR/expected.bin (the listed tokens, in case order)
'use strict';
const fs = require('fs');
const path = require('path');
const cache = path.resolve(__dirname, '../../data/cache');
const requireFromCache = require('module').createRequire(path.join(cache, 'package.json'));

// The two shard formats: header magic and version, bytes per token, the token before each document.
const GPT2 = { magic: 20240520, version: 1, width: 2, start: 50256 };
const LLAMA3 = { magic: 20240801, version: 7, width: 4, start: 128000 };

function writeShard(outPath, documents, format = GPT2) {
  const count = documents.reduce((n, tokens) => n + 1 + tokens.length, 0);
  const buffer = Buffer.alloc(1024 + format.width * count);
  buffer.writeInt32LE(format.magic, 0);
  buffer.writeInt32LE(format.version, 4);
  buffer.writeInt32LE(count, 8);
  let offset = 1024;
  for (const tokens of documents) {
    for (const token of [format.start, ...tokens]) {
      if (format.width === 2) buffer.writeUInt16LE(token, offset);
      else buffer.writeUInt32LE(token, offset);
      offset += format.width;
    }
  }
  fs.writeFileSync(outPath, buffer);
}

const [mode, ...rest] = process.argv.slice(2);
if (mode === 'tiktoken') {
  const [outPath, ...files] = rest;
  const encoding = requireFromCache('js-tiktoken').getEncoding('gpt2');
  writeShard(outPath, files.map((file) => encoding.encode(fs.readFileSync(file, 'utf8'))));
} else if (mode === 'llama3') {
  const [outPath, ...files] = rest;
  const { llama3Tokenizer } =
    requireFromCache('llama3-tokenizer-js/bundle/commonjs-llama3-tokenizer-with-baked-data.cjs');
  // No begin/end tokens of its own, and a special-token pattern that never matches.
  const options = { bos: false, eos: false, specialTokenRegex: /(?!)/g };
  const encode = (file) => llama3Tokenizer.encode(fs.readFileSync(file, 'utf8'), options);
  writeShard(outPath, files.map(encode), LLAMA3);
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
  console.error('usage: node reference_tokenizer.cjs tiktoken|llama3 OUT.bin FILE... | testplans DIR');
  process.exit(2);
}
