// Magic numbers and versions of the llm.c-compatible file formats (GUIDE §2). Every header is 256
// little-endian int32 values; unused slots are zero.
#pragma once

constexpr int FILE_HEADER_INTS = 256;
constexpr int FILE_HEADER_BYTES = FILE_HEADER_INTS * 4;

// Token shard: [0] magic, [1] version, [2] number of tokens; then that many uint16 tokens.
constexpr int TOKEN_SHARD_MAGIC = 20240520;
constexpr int TOKEN_SHARD_VERSION = 1;

// Model weights: [0] magic, [1] version, [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp.
constexpr int MODEL_FILE_MAGIC = 20240326;
constexpr int MODEL_FILE_VERSION_FP32 = 3;
constexpr int MODEL_FILE_VERSION_BF16 = 5;

// Tokenizer decode table: [0] magic, [1] version, [2] vocab size, [3] EOT id; then per token one
// uint8 length and that many bytes.
constexpr int DECODE_TABLE_MAGIC = 20240328;
constexpr int DECODE_TABLE_VERSION = 2;
constexpr int GPT2_EOT_TOKEN = 50256;
constexpr int GPT2_VOCAB_SIZE = 50257;
