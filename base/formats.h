// Magic numbers and versions of the llm.c-compatible file formats. Every header is 256
// little-endian int32 values; unused slots are zero.
#pragma once

constexpr int FILE_HEADER_INTS = 256;
constexpr int FILE_HEADER_BYTES = FILE_HEADER_INTS * 4;

// Token shard: [0] magic, [1] version, [2] number of tokens; then that many uint16 tokens.
constexpr int TOKEN_SHARD_MAGIC = 20240520;
constexpr int TOKEN_SHARD_VERSION = 1;
// Llama 3 token shard (llm.c's): the same header with its own magic and version; uint32 tokens.
constexpr int LLAMA3_TOKEN_SHARD_MAGIC = 20240801;
constexpr int LLAMA3_TOKEN_SHARD_VERSION = 7;

// The version a token shard with this magic must have, and the bytes of each of its tokens;
// false when the magic is neither token shard's.
inline bool token_shard_layout(int magic, int* version, int* token_bytes) {
    if (magic != TOKEN_SHARD_MAGIC && magic != LLAMA3_TOKEN_SHARD_MAGIC) return false;
    const bool llama3 = magic == LLAMA3_TOKEN_SHARD_MAGIC;
    *version = llama3 ? LLAMA3_TOKEN_SHARD_VERSION : TOKEN_SHARD_VERSION;
    *token_bytes = llama3 ? 4 : 2;
    return true;
}

// Model weights: [0] magic, [1] version, [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp.
constexpr int MODEL_FILE_MAGIC = 20240326;
constexpr int MODEL_FILE_VERSION_FP32 = 3;
constexpr int MODEL_FILE_VERSION_BF16 = 5;
// Llama 3 model weights (ours: llm.c has no merged Llama 3 model file): the slots are listed in
// base/llama_model_file.h. The magic differs from 20240803, which llm.c's unmerged Llama 3 draft
// wrote, so that such a file is refused by its magic rather than misread.
constexpr int LLAMA3_MODEL_FILE_MAGIC = 20250327;
constexpr int LLAMA3_MODEL_FILE_VERSION = 1;

// Tokenizer decode table: [0] magic, [1] version, [2] vocab size, [3] EOT id; then per token one
// uint8 length and that many bytes.
constexpr int DECODE_TABLE_MAGIC = 20240328;
constexpr int DECODE_TABLE_VERSION = 2;
constexpr int GPT2_EOT_TOKEN = 50256;
constexpr int GPT2_VOCAB_SIZE = 50257;
// Llama 3's tokenizer: 128,000 ordinary tokens, then 256 special ones.
constexpr int LLAMA3_BOS_TOKEN = 128000;  // <|begin_of_text|>, before each document
constexpr int LLAMA3_EOT_TOKEN = 128001;  // <|end_of_text|>
constexpr int LLAMA3_VOCAB_SIZE = 128256;

// llm.c's multiple-choice eval file (HellaSwag): [0] magic, [1] version, [2] number of examples,
// [3] the longest example in bytes; then the examples (train/hellaswag.h).
constexpr int EVAL_FILE_MAGIC = 20240522;
constexpr int EVAL_FILE_VERSION = 1;

// What a file is, from the first int32 of its header, for messages such as "x.bin is a token shard,
// not a model file"; nullptr when the magic is none of the formats above. Our training-state files
// start with the bytes "GPTS".
inline const char* file_kind_of_magic(int magic) {
    switch (magic) {
        case TOKEN_SHARD_MAGIC: return "a token shard";
        case LLAMA3_TOKEN_SHARD_MAGIC: return "a Llama 3 token shard";
        case MODEL_FILE_MAGIC: return "a model file";
        case LLAMA3_MODEL_FILE_MAGIC: return "a Llama 3 model file";
        case DECODE_TABLE_MAGIC: return "a tokenizer decode table";
        case EVAL_FILE_MAGIC: return "an eval file (HellaSwag)";
        case 0x53545047: return "a training state file";  // "GPTS", little-endian
    }
    return nullptr;
}
